"""``mask`` mode, observation masking (see docs/behaviour.md, "mask"): every tool output outside the
protected tail and the pins is replaced by a one-line placeholder that names the call it answered.
No model call; a placeholder is only used where it is smaller than the output it replaces, so the
transcript never grows; every other message is returned exactly as it came."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactor.call_record import CallRecord
from compactor.chat import Message, role_of
from compactor.compaction.modes import check_pins
from compactor.compaction.reassembly import first_changed_index, preserved_prefix_bytes
from compactor.compaction.units import tail_indexes
from compactor.jsonutil import dense_size

if TYPE_CHECKING:
    from compactor.compaction.modes import ModeContext
    from compactor.models import CompactRequest

NAME = "mask"
PLACEHOLDER = "[tool output of {call} omitted by compaction: {size} bytes]"


@dataclass(frozen=True)
class Masked:
    index: int
    tool_call_id: str | None
    name: str | None
    original_bytes: int


def _call_names(messages: list[Message]) -> dict[str, str]:
    """``tool_call_id`` -> function name, from the assistants' ``tool_calls``."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or [] if isinstance(message, dict) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(call, dict) and isinstance(call.get("id"), str) and isinstance(function, dict):
                names[call["id"]] = str(function.get("name"))
    return names


def placeholder(name: str | None, call_id: str | None, size: int) -> str:
    call = f"{name or 'a tool'} (call {call_id})" if call_id else (name or "a tool")
    return PLACEHOLDER.format(call=call, size=size)


def mask(messages: list[Message], *, keep_recent: int, pinned_indices: list[int] | None
         ) -> tuple[list[Message], list[Masked]]:
    """The masked messages and what was masked (in order)."""
    protected = set(tail_indexes(len(messages), keep_recent)) | set(pinned_indices or ())
    names = _call_names(messages)
    output: list[Message] = []
    masked: list[Masked] = []
    for index, message in enumerate(messages):
        if index in protected or role_of(message) != "tool":
            output.append(message)
            continue
        call_id = message.get("tool_call_id") if isinstance(message.get("tool_call_id"), str) else None
        name = names.get(call_id) if call_id else None
        size = dense_size(message.get("content"))
        replacement = {**message, "content": placeholder(name, call_id, size)}
        if dense_size(replacement) < dense_size(message):
            output.append(replacement)
            masked.append(Masked(index, call_id, name, size))
        else:
            output.append(message)
    return output, masked


class MaskMode:
    """``mask``: old tool outputs become placeholders; the baseline the other modes are measured against."""

    name = NAME

    def prepare(self, request: CompactRequest, context: ModeContext) -> None:
        check_pins(request)

    async def run(self, plan: None, context: ModeContext) -> None:
        return None  # no model call

    def report(self, request: CompactRequest, plan: None, ran: None) -> CallRecord:
        messages = request.messages
        output, masked = mask(messages, keep_recent=request.keep_recent, pinned_indices=request.pinned_indices)
        original_bytes, output_bytes = dense_size(messages), dense_size(output)
        changed = first_changed_index(messages, output)
        compaction = {
            "mode": NAME,
            "original_bytes": original_bytes,
            "output_bytes": output_bytes,
            "masked": [{"index": m.index, "tool_call_id": m.tool_call_id, "name": m.name,
                        "original_bytes": m.original_bytes} for m in masked],
            "first_changed_index": changed,
            "preserved_prefix_bytes": preserved_prefix_bytes(messages, changed, original_bytes),
        }
        body = {"messages": output, "compacted": bool(masked), "compaction": compaction}
        return CallRecord(status=200, body=body, mode=NAME, bytes_in=original_bytes, bytes_out=output_bytes,
                          report=compaction)


MODE = MaskMode()
