"""Chat messages in the OpenAI shape, rewritten for APIs that take a separate system prompt and
alternating user/assistant text turns (the ``anthropic`` and ``bedrock`` transports).

System (and developer) messages join the system prompt; tool results and tool calls become text in
the turn they belong to; consecutive messages of one role merge; the first turn is always the user's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compactor.chat import content_text
from compactor.markers import tool_call_line

_SYSTEM_ROLES = frozenset({"system", "developer"})
# APIs without a JSON switch get this instruction in JSON mode; the answer is validated all the same.
JSON_INSTRUCTION = "Reply with one JSON object and nothing else: no prose, no code fences."


@dataclass(frozen=True)
class Turns:
    system: str  # "" when there is none
    turns: tuple[tuple[str, str], ...]  # (role "user" | "assistant", text), alternating, user first


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
        text = f"[tool result] {text}"
    return text


def to_turns(messages: list[dict[str, Any]], *, json_mode: bool = False) -> Turns:
    """The system prompt and the alternating turns of ``messages`` (JSON mode: plus the JSON instruction)."""
    system: list[str] = []
    turns: list[list[str]] = []  # [role, text]
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role in _SYSTEM_ROLES:
            system.append(_text(message.get("content")))
            continue
        role = "assistant" if role == "assistant" else "user"
        text = _message_text(message)
        if turns and turns[-1][0] == role:
            turns[-1][1] += "\n\n" + text
        else:
            turns.append([role, text])
    if not turns or turns[0][0] != "user":
        turns.insert(0, ["user", "(conversation follows)" if turns else "(no message)"])
    if json_mode:
        system.append(JSON_INSTRUCTION)
    # Empty text blocks are refused by both APIs.
    return Turns("\n\n".join(part for part in system if part),
                 tuple((role, text if text.strip() else "(empty)") for role, text in turns))
