"""Units and pins of decision mode (REFERENCE §3.2).

A unit is a tool call with all its results (an assistant message with ``tool_calls`` and every
immediately following ``tool`` message), or any other single message. Unit id = ``fragment_<start>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compactor.chat import Message, content_text, has_tool_calls, role_of

ALWAYS_PINNED_ROLES = ("system", "developer")
# A ``user`` message right after an assistant turn that reads as a tool observation of a text agent
# (docs/differences.md): mini-swe-agent's ``<returncode>``/``<output>``, SWE-agent's ``OBSERVATION:`` and
# ``(Current directory: …)`` footer, OpenHands' ``EXECUTION RESULT of [...]`` and exit-code footer, and the
# ``<tool_response>``-style wrappers of prompt-based tool calling.
_OBSERVATION = re.compile(
    r"<returncode>|<output>|<output_head>|^\s*(?:OBSERVATION|Observation)\s*:|\(Current directory: [^)\n]*\)"
    r"|^\s*EXECUTION RESULT of \[|\[Command finished with exit code|<tool_response>|<tool_result>"
    r"|<function_results>|^\s*Tool (?:result|output)\s*:",
    re.MULTILINE,
)


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


def is_text_observation(messages: list[Message], index: int) -> bool:
    """True for a ``user`` message that answers the assistant turn before it with a tool observation."""
    message = messages[index]
    if role_of(message) != "user" or index == 0 or role_of(messages[index - 1]) != "assistant":
        return False
    return _OBSERVATION.search(content_text(message.get("content"))) is not None


def instruction_pins(messages: list[Message], pinned_indices: list[int] | None) -> list[int]:
    """Sorted pinned indexes: explicit pins (else every user message that is not a text agent's tool
    observation) plus every system/developer message."""
    pins = set(pinned_indices) if pinned_indices is not None else {
        i for i, m in enumerate(messages) if role_of(m) == "user" and not is_text_observation(messages, i)}
    pins.update(i for i, m in enumerate(messages) if role_of(m) in ALWAYS_PINNED_ROLES)
    return sorted(pins)


def tail_indexes(count: int, keep_recent: int) -> range:
    keep = max(1, keep_recent)
    return range(max(0, count - keep), count)
