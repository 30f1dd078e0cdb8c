"""The bounded view of a unit too big for one summary record (docs/behaviour.md "Limits and reasons",
docs/offline-offers.md "Units too big for one record"): what the summarizer reads of it, the head and tail of each
long string around an omitted-bytes marker, and lines of the middle that name what later messages use.

Imported only when a request holds such a unit (compaction/preparation.py), so that no other request loads or
compiles it (docs/performance.md "Units too big for one summary record").
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from compactor.formats.base import Item
from compactor.jsonutil import dense_dumps, dense_join, json_text_size, utf8_len
from compactor.markers import OMITTED_MARKER

_BOUNDED_TRIES = 6
_BOUNDED_KEEP_MIN = 256  # characters a cut string keeps at the least: a shorter head and tail say too little


def bounded_item(view: list[Item], limit: int, size: int | None = None,
                 marks: Callable[[str], list[int]] | None = None) -> tuple[str, int] | None:
    """The dense JSON of the :func:`bounded_view` of a unit's model ``view`` whose JSON string takes at most
    ``limit`` bytes (``size``: that of the whole view's, when known), and the bytes it leaves out; ``None`` when no
    such view keeps ``_BOUNDED_KEEP_MIN`` characters of each long string (the unit is then not sent). The longest
    strings are cut first, all of them to one length, found by measuring: escapes make the JSON longer than its
    characters. ``marks``: as in :func:`bounded_view`, where the lines of a middle to keep are."""
    lengths = sorted(view_strings(view))
    if not lengths or limit <= 0:
        return None
    if size is None:
        size = json_text_size(dense_join([dense_dumps(v) for v in view]))
    chars = sum(lengths)
    budget = chars * limit // max(1, size)
    for _ in range(_BOUNDED_TRIES):
        keep = _level(lengths, budget)
        if keep < _BOUNDED_KEEP_MIN:
            return None
        shown, omitted = bounded_view(view, keep, marks)
        text = dense_join([dense_dumps(v) for v in shown])
        size = json_text_size(text)
        if size <= limit:
            return text, omitted
        budget = budget * limit // size * 31 // 32
    return None


def _level(lengths: list[int], budget: int) -> int:
    """The length to cut the longest of ``lengths`` (sorted) to so that they hold ``budget`` characters together."""
    kept = 0
    for index, length in enumerate(lengths):
        left = len(lengths) - index
        if kept + length * left > budget:
            return max(0, (budget - kept) // left)
        kept += length
    return lengths[-1]


def view_strings(value: Any) -> list[int]:
    """The length of each string member of ``value`` (a view item, a list of them), keys aside: what
    :func:`bounded_view` may cut."""
    if type(value) is str:
        return [len(value)]
    members = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [length for member in members for length in view_strings(member)]


def bounded_view(value: Any, keep: int, marks: Callable[[str], list[int]] | None = None) -> tuple[Any, int]:
    """``value`` (a unit's model view, or a member of it) with each string longer than ``keep`` characters cut to
    about ``keep`` of them, its head and tail (cut at a line break near the cut when there is one) around an
    :data:`~compactor.markers.OMITTED_MARKER` line naming the UTF-8 bytes left out, and those bytes in all: the
    summarizer's view of a unit too big for a summary record (docs/behaviour.md "Limits and reasons"). With
    ``marks`` (a long string -> offsets in it, in order: where the names later messages use again stand), the
    lines of its middle holding them stay too, in up to a quarter of ``keep``, each gap around them its own
    marker. Copied only where a string is cut, key order kept, so the caller's items are never changed."""
    if type(value) is str:
        return _cut_string(value, keep, marks) if len(value) > keep else (value, 0)
    if isinstance(value, dict):
        cut: dict[str, Any] | None = None
        omitted = 0
        for key, member in value.items():
            shown, less = (bounded_view(member, keep, marks) if isinstance(member, (str, dict, list))
                           else (member, 0))
            if less:
                if cut is None:
                    cut = dict(value)
                cut[key] = shown
                omitted += less
        return (value if cut is None else cut), omitted
    if isinstance(value, list):
        pairs = [bounded_view(member, keep, marks) for member in value]
        omitted = sum(less for _, less in pairs)
        return ([shown for shown, _ in pairs] if omitted else value), omitted
    return value, 0


def _ends(text: str, half: int) -> tuple[str, str]:
    """The first and last ``half`` characters of ``text``, each cut at a line break in its inner fifth when it has
    one."""
    head, tail = text[:half], text[len(text) - half:]
    at = head.rfind("\n", half * 4 // 5)
    if at >= 0:
        head = head[:at + 1]
    at = tail.find("\n", 0, half // 5)
    if at >= 0:
        tail = tail[at + 1:]
    return head, tail


def _middle_lines(text: str, keep: int, room: int, offsets: list[int]) -> tuple[str, str, list[str | int], int]:
    """The ends of ``text`` in ``keep - room`` characters, what :func:`_cut_string` shows between them (each line
    of the middle holding one of ``offsets``, in order, while they take at most ``room`` characters, and the UTF-8
    bytes of each gap around them) and the characters those lines take."""
    head, tail = _ends(text, max(1, (keep - room) // 2))
    low, high = len(head), len(text) - len(tail)
    pieces: list[str | int] = []
    used, done = 0, low  # ``done``: where the middle's next gap starts (after the last line taken)
    for offset in offsets[bisect_left(offsets, low):]:
        if offset >= high:
            break
        if offset < done:
            continue
        start = max(low, text.rfind("\n", low, offset) + 1)
        end = text.find("\n", offset, high)
        end = high if end < 0 else end
        if used + end - start >= room:
            break
        _gap(pieces, text[done:start])
        pieces.append(text[start:end])
        used += end - start + 1
        done = end
    if used:
        _gap(pieces, text[done:high])
    return head, tail, pieces, used


def _gap(pieces: list[str | int], gap: str) -> None:
    """Add the UTF-8 bytes of ``gap`` (the text between two lines taken, or an end and a line) to ``pieces`` when it
    holds more than the line breaks around it, which the view shows."""
    if pieces and gap.startswith("\n"):
        gap = gap[1:]
    if gap.endswith("\n"):
        gap = gap[:-1]
    if gap:
        pieces.append(utf8_len(gap))


def _cut_string(text: str, keep: int, marks: Callable[[str], list[int]] | None) -> tuple[str, int]:
    """:func:`bounded_view` of one string longer than ``keep``: ``(shown, bytes left out)``."""
    offsets = marks(text) if marks is not None else None
    if offsets:
        head, tail, pieces, used = _middle_lines(text, keep, keep // 4, offsets)
        if used:  # the ends take the room the middle's lines leave
            head, tail, pieces, used = _middle_lines(text, keep, used, offsets)
        if used:
            omitted = sum(piece for piece in pieces if type(piece) is int)
            shown = [OMITTED_MARKER.format(omitted=piece) if type(piece) is int else piece for piece in pieces]
            return "\n".join([head.removesuffix("\n"), *shown, tail]), omitted
    head, tail = _ends(text, max(1, keep // 2))
    omitted = utf8_len(text) - utf8_len(head) - utf8_len(tail)
    line_break = "" if not head or head.endswith("\n") else "\n"
    return f"{head}{line_break}{OMITTED_MARKER.format(omitted=omitted)}\n{tail}", omitted
