"""Small facts about OpenAI chat messages: roles, tool calls, the text of a content value."""

from __future__ import annotations

from typing import Any

from compactor.jsonutil import dense_dumps

Message = dict[str, Any]


def role_of(message: Message) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def has_tool_calls(message: Message) -> bool:
    return isinstance(message, dict) and bool(message.get("tool_calls"))


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
