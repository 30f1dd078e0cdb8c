"""Small facts about OpenAI chat messages: roles, tool calls, the text of a content value."""

from __future__ import annotations

import json
from typing import Any

from compactor.jsonutil import dense_dumps

Message = dict[str, Any]


def role_of(message: Message) -> Any:
    return message.get("role") if isinstance(message, dict) else None


# The roles of a message answering a call: ``tool`` answers ``tool_calls`` (by ``tool_call_id``), ``function``
# answers the deprecated single ``function_call`` of the message before it (docs/formats.md).
RESULT_ROLES = ("tool", "function")


def has_tool_calls(message: Message) -> bool:
    """Whether ``message`` makes calls: ``tool_calls``, or a legacy ``function_call`` object."""
    return isinstance(message, dict) and (bool(message.get("tool_calls"))
                                          or isinstance(message.get("function_call"), dict))


def call_function(call: Any) -> dict[str, Any] | None:
    """The ``{"name", "arguments"}`` of one ``tool_calls`` entry: a function call's ``function``, or a custom tool
    call's ``custom`` (``{"type": "custom", "custom": {"name", "input"}}``), its free-form ``input`` read as the
    arguments (docs/formats.md); ``None`` for anything else."""
    if not isinstance(call, dict):
        return None
    function = call.get("function")
    if isinstance(function, dict):
        return function
    custom = call.get("custom")
    if isinstance(custom, dict):
        return {"name": custom.get("name"), "arguments": custom.get("input")}
    return None


def is_tool_result(message: Message) -> bool:
    """Whether ``message`` answers a call (a ``tool`` message, or a legacy ``function`` one)."""
    return role_of(message) in RESULT_ROLES


def content_text(content: Any, separator: str = " ") -> str:
    """Text of a message content: strings as they are, list parts' ``text`` joined by ``separator``
    (a space; the provider turns join them with nothing), anything else as dense JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, dict)]
        return separator.join(part for part in parts if isinstance(part, str))
    return dense_dumps(content)


def audio_transcript(message: Message) -> str | None:
    """What an assistant said in an audio reply (Chat Completions' ``audio``: its ``id``, base64 ``data``,
    ``transcript`` and ``expires_at``, as the API returns it): its ``transcript``; ``""`` for a reply sent back by
    its ``id`` alone, as agents do on later turns (its words are stored with the API); ``None`` when ``message``
    holds no audio reply (docs/formats.md "Images and files")."""
    audio = message.get("audio") if isinstance(message, dict) else None
    if type(audio) is not dict:
        return None
    transcript = audio.get("transcript")
    return transcript if isinstance(transcript, str) else ""


def as_messages(value: Any) -> list[dict[str, Any]] | None:
    """``value`` as a list of chat messages (a single message becomes a list of one), else None.

    Anthropic Messages and OpenAI Responses items (docs/formats.md) are read as the chat messages they
    correspond to: calls become ``tool_calls``, results ``tool`` messages, hidden reasoning is skipped."""
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not items or not all(isinstance(item, dict) for item in items):
        return None
    messages = [m for item in items for m in chat_reading(item)]
    return messages or None


def _call(name: Any, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"type": "function", "function": {"name": name, "arguments": text}}


RESPONSES_CALL_INPUTS = {"custom_tool_call": "input", "apply_patch_call": "operation", "code_interpreter_call": "code",
                         "file_search_call": "queries", "image_generation_call": "revised_prompt"}
"""Where a Responses call item holds what it was asked to do, for the types whose field is not ``arguments`` (function,
MCP, tool search calls) or ``action`` (computer, shell, local shell and web search calls): a custom tool's free-form
``input``, an apply-patch call's ``operation`` (its file, its diff), the code a code interpreter ran, a file search's
``queries``, and the prompt an image generation used (``revised_prompt``, where the item has it). Before, these read as
``null``: seal's input said ``[tool call code_interpreter_call(null)]`` (docs/formats.md)."""


def responses_call_input(item: dict[str, Any]) -> Any:
    """What a Responses ``*_call`` item was asked to do (:data:`RESPONSES_CALL_INPUTS`); ``None`` when it says
    nothing."""
    field = RESPONSES_CALL_INPUTS.get(str(item.get("type")))
    if field is not None:
        return item.get(field)
    return item.get("arguments", item.get("input", item.get("action")))


IMAGE_PARTS = ("image", "image_url", "input_image", "computer_screenshot")
"""Content parts holding an image: Anthropic's ``image`` block, Chat Completions' ``image_url`` part, the Responses
API's ``input_image`` part and a ``computer_call_output``'s screenshot."""
FILE_PARTS = ("document", "file", "input_file")
"""Content parts holding a file: Anthropic's ``document`` block (its ``title``), Chat Completions' ``file`` part (its
``file.filename``), the Responses API's ``input_file`` part (its ``filename``)."""
_READ_BLOCKS = frozenset(("text", *IMAGE_PARTS, *FILE_PARTS))
"""The blocks of an Anthropic message holding calls or results that :func:`chat_reading` keeps in its chat message."""


def chat_reading(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages an item of any format (docs/formats.md) corresponds to (:func:`as_messages`): a chat
    message as it is, a Responses call (what it was asked, :func:`responses_call_input`) or output, an Anthropic
    message's ``tool_use`` and ``tool_result`` blocks as ``tool_calls`` and ``tool`` messages (its text, image and
    document blocks in a message of its role); nothing for any other typed item (hidden reasoning, a compaction)."""
    kind = item.get("type")
    if "role" not in item and isinstance(kind, str):  # an OpenAI Responses item
        if kind.endswith("_call_output"):
            return [{"role": "tool", "content": item.get("output")}]
        if kind.endswith("_call"):
            return [{"role": "assistant", "content": None,
                     "tool_calls": [_call(item.get("name", kind), responses_call_input(item))]}]
        return []
    content = item.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    if not any(str(b.get("type", "")).endswith(("tool_use", "tool_result")) for b in blocks):
        return [item]
    # Anthropic Messages blocks: tool_use -> tool_calls, tool_result -> tool messages.
    calls = [_call(b.get("name"), b.get("input")) for b in blocks if str(b.get("type")).endswith("tool_use")]
    # An image beside a tool_result (a harness attaching a screenshot after the results) is read too: without it, a
    # summary never said the image had been there (docs/formats.md "Images and files").
    text = [b for b in blocks if type(block_type := b.get("type")) is str and block_type in _READ_BLOCKS]
    out: list[dict[str, Any]] = []
    if calls or text:
        out.append({"role": item.get("role"), "content": text or None, **({"tool_calls": calls} if calls else {})})
    out += [{"role": "tool", "content": b.get("content")} for b in blocks if str(b.get("type")).endswith("tool_result")]
    return out
