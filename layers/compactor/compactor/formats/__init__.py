"""Transcript dialects (docs/formats.md): one module per ``format`` the API accepts and answers in."""

from __future__ import annotations

from compactor.formats.base import Dialect

DEFAULT_FORMAT = "openai-chat"
FORMAT_NAMES = ("openai-chat", "anthropic-messages", "openai-responses")
WINDOWED_FORMATS = ("openai-chat", "anthropic-messages")
"""The formats compacted in windows and read as streams (docs/scale.md): the others run as one request."""
_MODULES = {"openai-chat": "openai_chat", "anthropic-messages": "anthropic_messages",
            "openai-responses": "openai_responses"}


def get_dialect(name: str | None) -> Dialect:
    """The dialect of a ``format`` name (``None``: the default); ``KeyError`` for an unknown one."""
    from importlib import import_module

    return import_module(f"compactor.formats.{_MODULES[name or DEFAULT_FORMAT]}").DIALECT
