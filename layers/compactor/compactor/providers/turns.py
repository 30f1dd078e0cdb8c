"""Chat messages in the OpenAI shape, rewritten for APIs that take a separate system prompt and
alternating user/assistant text turns (the ``anthropic`` and ``bedrock`` transports).

System (and developer) messages join the system prompt; tool results and tool calls become text in
the turn they belong to; consecutive messages of one role merge; the first turn is always the user's.
A request's cache boundary (``CacheBoundary``) is carried over to the turn and offset it lands in.
"""

from __future__ import annotations

from typing import Any

from compactor.chat import content_text
from compactor.markers import tool_call_line
from compactor.providers.base import CacheBoundary
from compactor.records import record

_SYSTEM_ROLES = frozenset({"system", "developer"})
_TOOL_RESULT = "[tool result] "
# APIs without a JSON switch get this instruction in JSON mode; the answer is validated all the same.
JSON_INSTRUCTION = "Reply with one JSON object and nothing else: no prose, no code fences."


@record(frozen=True)
class Turns:
    """A chat request as alternating turns after its system text."""

    system: str  # "" when there is none
    turns: tuple[tuple[str, str], ...]  # (role "user" | "assistant", text), alternating, user first
    # (turn index, characters of that turn's text) where the request's cacheable prefix ends, if it has one
    # that lands in a turn (a boundary inside a system message is not carried over).
    cache_at: tuple[int, int] | None = None

    def cache_prefix_bytes(self) -> int:
        """UTF-8 bytes of the system prompt and the turns up to :attr:`cache_at` (0 without one)."""
        if self.cache_at is None:
            return 0
        index, chars = self.cache_at
        texts = [self.system, *(text for _, text in self.turns[:index]), self.turns[index][1][:chars]]
        return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)


def _text(content: Any) -> str:
    """A message's content as one text block: the text parts of a part list are joined as they are."""
    return content_text(content, separator="")


def _message_text(message: dict[str, Any]) -> str:
    text = _text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            text += "\n" + tool_call_line(function.get("name"), function.get("arguments"))
    if message.get("role") == "tool":
        text = _TOOL_RESULT + text
    return text


def _boundary_offset(message: dict[str, Any], chars: int) -> int | None:
    """Where ``chars`` characters of the message's string content end in its turn text, else None."""
    content = message.get("content")
    if not isinstance(content, str) or not 0 < chars <= len(content):
        return None
    return chars + (len(_TOOL_RESULT) if message.get("role") == "tool" else 0)


def to_turns(messages: list[dict[str, Any]], *, json_mode: bool = False,
             cache_boundary: CacheBoundary | None = None) -> Turns:
    """The system prompt and the alternating turns of ``messages`` (JSON mode: plus the JSON instruction),
    with ``cache_boundary`` as the turn and offset it lands in."""
    system: list[str] = []
    turns: list[list[str]] = []  # [role, text]
    cache_at: tuple[int, int] | None = None
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role in _SYSTEM_ROLES:
            system.append(_text(message.get("content")))
            continue
        role = "assistant" if role == "assistant" else "user"
        text = _message_text(message)
        if turns and turns[-1][0] == role:
            start = len(turns[-1][1]) + 2
            turns[-1][1] += "\n\n" + text
        else:
            start = 0
            turns.append([role, text])
        if cache_boundary is not None and index == cache_boundary.message:
            offset = _boundary_offset(message, cache_boundary.chars)
            cache_at = None if offset is None else (len(turns) - 1, start + offset)
    if not turns or turns[0][0] != "user":
        turns.insert(0, ["user", "(conversation follows)" if turns else "(no message)"])
        cache_at = None if cache_at is None else (cache_at[0] + 1, cache_at[1])
    if json_mode:
        system.append(JSON_INSTRUCTION)
    if cache_at is not None and not turns[cache_at[0]][1].strip():
        cache_at = None
    # Empty text blocks are refused by both APIs.
    return Turns("\n\n".join(part for part in system if part),
                 tuple((role, text if text.strip() else "(empty)") for role, text in turns), cache_at)
