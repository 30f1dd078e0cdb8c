"""``mask`` mode, observation masking (see docs/behaviour.md, "mask"): every tool output outside the
protected tail and the pins is replaced by a one-line placeholder that names the call it answered (in
``openai-chat`` also a text agent's observations, docs/differences.md). No model call; a placeholder is
only used where it is smaller than the output it replaces, so the transcript never grows; every other
item is returned exactly as it came, in the request's format."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compactor.call_record import CallRecord
from compactor.compaction.modes import check_pins, refuse_restorable
from compactor.compaction.reassembly import first_changed_index, preserved_prefix_bytes
from compactor.compaction.units import instruction_pins, tail_indexes, with_dialect_tail
from compactor.formats import get_dialect
from compactor.formats.base import Dialect, Item
from compactor.jsonutil import dense_size
from compactor.markers import short_name
from compactor.records import record

if TYPE_CHECKING:
    from compactor.compaction.modes import ModeContext
    from compactor.models import CompactRequest

NAME = "mask"


@record(frozen=True)
class Masked:
    """One masked tool output: where it was and how large."""

    index: int
    tool_call_id: str | None
    name: str | None
    original_bytes: int


def placeholder(name: str | None, call_id: str | None, size: int) -> str:
    """The one line that stands in for a masked output of ``size`` dense JSON bytes (``name`` already cut to
    :data:`compactor.markers.NAME_CHARS` characters)."""
    if call_id is None:
        if name is not None:  # a legacy function's output: named, with no call id
            return f"[output of {name} omitted by compaction: {size} bytes]"
        return f"[tool output omitted by compaction: {size} bytes]"
    return f"[output of {name or 'a tool'} (call {call_id}) omitted by compaction: {size} bytes]"


def protected_indexes(items: list[Item], keep_recent: int, pinned_indices: list[int] | None,
                      dialect: Dialect) -> set[int]:
    """What mask leaves alone, as every mode protects it (docs/behaviour.md#decision): the request's pins
    (else the dialect's default ones, the human's turns) and the always-pinned items, the last
    ``keep_recent`` items (widened to the tail the format protects), each with the whole unit holding it."""
    units = dialect.split_units(items)
    tail = with_dialect_tail(tail_indexes(len(items), keep_recent), items, units, dialect)
    protected = set(instruction_pins(items, pinned_indices, dialect)) | set(tail)
    return {i for unit in units if not protected.isdisjoint(unit.indexes()) for i in unit.indexes()}


def mask(items: list[Item], *, keep_recent: int, pinned_indices: list[int] | None,
         dialect: Dialect | None = None) -> tuple[list[Item], list[Masked]]:
    """The masked items and what was masked (in order)."""
    dialect = dialect or get_dialect(None)
    protected = protected_indexes(items, keep_recent, pinned_indices, dialect)
    names = dialect.call_names(items)
    output: list[Item] = []
    masked: list[Masked] = []
    for index, item in enumerate(items):
        seen: list[Masked] = []

        def stand_in(call_id: str | None, content: Any, name: str | None = None) -> str | None:
            """The placeholder of one output, measured on that output alone; None (the output stays) when
            the placeholder would not be smaller than it."""
            size = dense_size(content)
            name = name if name is not None else names.get(call_id) if call_id else None
            if name is not None:  # a transcript's name is untrusted: a 1 MB one made each placeholder 1 MB
                name = short_name(name)
            text = placeholder(name, call_id, size)
            if dense_size(text) >= size:
                return None
            seen.append(Masked(index, call_id, name, size))
            return text

        replacement = None if index in protected else dialect.masked(items, index, stand_in)
        if replacement is not None and seen:
            output.append(replacement)
            masked += seen
        else:
            output.append(item)
    return output, masked


class MaskMode:
    """``mask``: old tool outputs become placeholders; the baseline the other modes are measured against."""

    name = NAME

    def prepare(self, request: CompactRequest, context: ModeContext) -> None:
        refuse_restorable(request)  # a masked output is gone: no original is kept to expand
        check_pins(request)

    async def run(self, plan: None, context: ModeContext) -> None:
        return None  # no model call

    def report(self, request: CompactRequest, plan: None, ran: None) -> CallRecord:
        items = request.messages
        output, masked = mask(items, keep_recent=request.keep_recent, pinned_indices=request.pinned_indices,
                              dialect=get_dialect(request.format))
        original_bytes, output_bytes = dense_size(items), dense_size(output)
        changed = first_changed_index(items, output)
        compaction = {
            "mode": NAME,
            "original_bytes": original_bytes,
            "output_bytes": output_bytes,
            "masked": [{"index": m.index, "tool_call_id": m.tool_call_id, "name": m.name,
                        "original_bytes": m.original_bytes} for m in masked],
            "first_changed_index": changed,
            "preserved_prefix_bytes": preserved_prefix_bytes(items, changed, original_bytes),
        }
        body = {"messages": output, "compacted": bool(masked), "compaction": compaction}
        return CallRecord(status=200, body=body, mode=NAME, bytes_in=original_bytes, bytes_out=output_bytes,
                          report=compaction)


MODE = MaskMode()
