"""Small facts about OpenAI chat messages shared by both compaction modes."""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


def role_of(message: Message) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def has_tool_calls(message: Message) -> bool:
    return isinstance(message, dict) and bool(message.get("tool_calls"))


def content_text(content: Any) -> str:
    """Text of a message content: strings as they are, list parts' ``text`` joined by spaces."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    return str(content)
