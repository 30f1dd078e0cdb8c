"""The texts Compactor writes into what a model reads and that other parts read back: one home each.

The compaction modes write them (decision payloads, rendered conversations, sealed summaries); the
built-in offline offers (``compactor.offline``) recognise them, importing them from here rather than
copying the strings (docs/behaviour.md#decision, docs/behaviour.md#seal).
"""

from __future__ import annotations

import re
from typing import Any, Final

from compactor.patterns import lazy, pattern

# A candidate's evidence longer than its excerpt limit: head + EVIDENCE_MARKER + tail.
EVIDENCE_MARKER: Final = "[excerpt; full item goes only to summary]"
# A recent protected unit shown only in part in the decision state.
RECENT_MARKER: Final = "[excerpt]"
# What stands for the middle of a long string in the bounded view of a unit too big for a summary record
# (docs/behaviour.md "Limits and reasons"): the summarizer reads the string's head and tail around it (and lines of
# its middle between two of them), and says it saw only part.
OMITTED_MARKER: Final = "[… {omitted} bytes omitted …]"
omitted_marker_pattern: Final = lazy(r"\[… (\d+) bytes omitted …\]")
# The first line of the system message that replaces a sealed middle.
SEAL_HEAD: Final = "[Earlier conversation, sealed summary]"

_FRAGMENT_PREFIX: Final = "fragment_"
_FRAGMENT_ID: Final = pattern(re.escape(_FRAGMENT_PREFIX) + r"(\d+)")
_TOOL_CALL_OPEN: Final = "[tool call "
# A rendered tool call line: ``[tool call <name>(<arguments>)]`` (groups: name, arguments); compiled on first
# use, which a first request may never make (docs/performance.md#the-workers-cold-start-sixth-round-issue-11).
tool_call_pattern: Final = lazy(r"^" + re.escape(_TOOL_CALL_OPEN) + r"([^(\n]*)\((.*)\)\]$", re.MULTILINE)


def fragment_id(start: int) -> str:
    """The id of the unit whose first message has index ``start``: ``fragment_<start>``."""
    return f"{_FRAGMENT_PREFIX}{start}"


def fragment_start(identifier: str) -> int | None:
    """The first message index a fragment id names, or None when ``identifier`` is not one."""
    match = _FRAGMENT_ID.fullmatch(identifier)
    return int(match.group(1)) if match else None


NAME_CHARS: Final = 128
"""A tool's name or a message's role as Compactor writes it where it only names it (the reports, mask's placeholders):
cut to this many characters, the last one ``…``. A transcript's names are untrusted: a 1 MB tool name was shown in
full wherever it appeared, and made every placeholder naming it 1 MB. The providers' own limits on tool names are 64
or 128 characters."""


def short_name(value: object) -> str:
    """``value`` (a tool's name, a role) cut to at most :data:`NAME_CHARS` characters."""
    text = str(value)
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1] + "…"


def tool_call_line(name: Any, arguments: Any) -> str:
    """How a rendered conversation shows one tool call."""
    return f"{_TOOL_CALL_OPEN}{name}({arguments})]"
