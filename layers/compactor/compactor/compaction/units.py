"""Units and pins of decision mode (docs/behaviour.md#decision), in ``openai-chat``; other formats: docs/formats.md.

A unit is a tool call with all its results (an assistant message with ``tool_calls`` and every
immediately following ``tool`` message, or one with a legacy ``function_call`` and the ``function``
message answering it), or any other single message. Unit id = ``fragment_<start>``.
"""

from __future__ import annotations

import re
from functools import cache, cached_property
from typing import TYPE_CHECKING

from compactor.chat import Message, content_text, has_tool_calls, is_tool_result, role_of
from compactor.markers import fragment_id
from compactor.records import record

if TYPE_CHECKING:
    from compactor.formats.base import Dialect

ALWAYS_PINNED_ROLES = ("system", "developer")
# A ``user`` message right after an assistant turn that reads as a tool observation of a text agent
# (docs/differences.md): mini-swe-agent's ``<returncode>``/``<output>``, SWE-agent's ``OBSERVATION:`` and
# ``(Current directory: …)`` footer, OpenHands' ``EXECUTION RESULT of [...]`` and exit-code footer, and the
# ``<tool_response>``-style wrappers of prompt-based tool calling.
# Compiled on first use, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_observation = cache(lambda: re.compile(
    r"<returncode>|<output>|<output_head>|^\s*(?:OBSERVATION|Observation)\s*:|\(Current directory: [^)\n]*\)"
    r"|^\s*EXECUTION RESULT of \[|\[Command finished with exit code|<tool_response>|<tool_result>"
    r"|<function_results>|^\s*Tool (?:result|output)\s*:",
    re.MULTILINE,
))


@record(frozen=True)
class Unit:
    """Messages ``start`` up to ``end`` (exclusive) that stay or go together."""

    start: int
    end: int  # exclusive

    @cached_property  # read for every unit in several passes of a request (docs/performance.md)
    def id(self) -> str:
        return fragment_id(self.start)

    def indexes(self) -> range:
        return range(self.start, self.end)


def split_units(messages: list[Message]) -> list[Unit]:
    units: list[Unit] = []
    i, n = 0, len(messages)
    while i < n:
        end = i + 1
        if has_tool_calls(messages[i]):
            while end < n and is_tool_result(messages[end]):
                end += 1
        units.append(Unit(i, end))
        i = end
    return units


def observes(message: Message, previous: Message | None) -> bool:
    """True for a ``user`` message that answers the assistant turn ``previous`` with a tool observation."""
    if role_of(message) != "user" or previous is None or role_of(previous) != "assistant":
        return False
    return _observation().search(content_text(message.get("content"))) is not None


def is_default_pin(message: Message, previous: Message | None) -> bool:
    """Pinned when a request has no ``pinned_indices``: system/developer messages and genuine user inputs."""
    role = role_of(message)
    return role in ALWAYS_PINNED_ROLES or (role == "user" and not observes(message, previous))


def is_text_observation(messages: list[Message], index: int) -> bool:
    """:func:`observes` for ``messages[index]``."""
    return observes(messages[index], messages[index - 1] if index else None)


def instruction_pins(messages: list[Message], pinned_indices: list[int] | None,
                     dialect: Dialect | None = None) -> list[int]:
    """Sorted pinned indexes: explicit pins (else the dialect's default pins: in ``openai-chat`` every user
    message that is not a text agent's tool observation) plus its always-pinned items (system/developer messages)."""
    if dialect is None:
        from compactor.formats import get_dialect

        dialect = get_dialect(None)
    pins = set(pinned_indices) if pinned_indices is not None else dialect.default_pins(messages)
    return sorted(pins | dialect.always_pinned(messages))


def tail_indexes(count: int, keep_recent: int) -> range:
    keep = max(1, keep_recent)
    return range(max(0, count - keep), count)


def with_dialect_tail(tail: range, items: list[Message], units: list[Unit], dialect: Dialect) -> range:
    """``tail`` (the last ``keep_recent`` items) widened to the tail the format itself protects
    (``Dialect.protected_tail_start``: in ``anthropic-messages`` the last two units of the turn in progress)."""
    start = dialect.protected_tail_start(items, units)
    return range(start, tail.stop) if start is not None and start < tail.start else tail
