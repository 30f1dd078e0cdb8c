"""Salience hints of decision mode: the names (identifiers and paths) of a batch that later messages use
again. They go into the summary prompt so that any summarizer, model or built-in, keeps them
(docs/offline-offers.md)."""

from __future__ import annotations

import re

from compactor.chat import Message, content_text
from compactor.jsonutil import dense_dumps

MAX_NAMES = 80
MAX_NAMES_BYTES = 1500
_TOKEN = re.compile(r"[A-Za-z_~./][\w./~@+-]*")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _is_name(token: str) -> bool:
    """Paths (``a/b``, ``x.py``) and code-like identifiers (snake_case, camelCase, dotted); not words."""
    if len(token) < 4 or len(token) > 120:
        return False
    if "/" in token:
        return "//" not in token and any(c.isalpha() for c in token)
    if not _IDENTIFIER.fullmatch(token):
        return False
    if "." in token:
        return True
    core = token.strip("_")
    if "_" in core:
        return any(c.isalpha() for c in core)
    return any(c.isupper() for c in core[1:]) and any(c.islower() for c in core)


def names_in(text: str) -> set[str]:
    return {token for raw in _TOKEN.findall(text) if _is_name(token := raw.rstrip(".,:;"))}


def message_names(message: Message) -> set[str]:
    text = content_text(message.get("content")) if isinstance(message, dict) else ""
    if isinstance(message, dict) and message.get("tool_calls"):
        text += " " + dense_dumps(message["tool_calls"]).replace("\\n", " ").replace('\\"', '"')
    return names_in(text)


def later_names(messages: list[Message]) -> list[set[str]]:
    """For each index i, the names of every message after i."""
    after: list[set[str]] = [set() for _ in messages]
    running: set[str] = set()
    for index in range(len(messages) - 1, -1, -1):
        after[index] = set(running)
        running |= message_names(messages[index])
    return after


def batch_hint(names: list[str]) -> list[str]:
    """The names that fit the hint's bounds, in the given order."""
    chosen: list[str] = []
    size = 0
    for name in names[:MAX_NAMES]:
        size += len(name.encode("utf-8")) + 2
        if size > MAX_NAMES_BYTES:
            break
        chosen.append(name)
    return chosen
