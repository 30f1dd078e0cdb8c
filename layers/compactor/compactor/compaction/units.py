"""Units and pins of decision mode (REFERENCE §3.2).

A unit is a tool call with all its results (an assistant message with ``tool_calls`` and every
immediately following ``tool`` message), or any other single message. Unit id = ``fragment_<start>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from compactor.chat import Message, has_tool_calls, role_of

ALWAYS_PINNED_ROLES = ("system", "developer")


@dataclass(frozen=True)
class Unit:
    start: int
    end: int  # exclusive

    @property
    def id(self) -> str:
        return f"fragment_{self.start}"

    def indexes(self) -> range:
        return range(self.start, self.end)


def split_units(messages: list[Message]) -> list[Unit]:
    units: list[Unit] = []
    i, n = 0, len(messages)
    while i < n:
        end = i + 1
        if has_tool_calls(messages[i]):
            while end < n and role_of(messages[end]) == "tool":
                end += 1
        units.append(Unit(i, end))
        i = end
    return units


def instruction_pins(messages: list[Message], pinned_indices: list[int] | None) -> list[int]:
    """Sorted pinned indexes: explicit pins (else every user message) plus every system/developer message."""
    pins = set(pinned_indices) if pinned_indices is not None else {
        i for i, m in enumerate(messages) if role_of(m) == "user"}
    pins.update(i for i, m in enumerate(messages) if role_of(m) in ALWAYS_PINNED_ROLES)
    return sorted(pins)


def tail_indexes(count: int, keep_recent: int) -> range:
    keep = max(1, keep_recent)
    return range(max(0, count - keep), count)
