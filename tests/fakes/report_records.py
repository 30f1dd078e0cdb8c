"""Call records for the HTML report's tests, made without running a model (the report renders what a record says)."""

from __future__ import annotations

from typing import Any

from compactor.call_record import CallRecord
from compactor.jsonutil import dense_size


def kept_record(messages: list[dict[str, Any]], units: list[dict[str, Any]]) -> CallRecord:
    """A decision call's record that kept every one of ``units``: its output is ``messages`` as they were."""
    size = dense_size(messages)
    report = {"original_bytes": size, "output_bytes": size, "target_bytes": 10, "target_ratio": 0.1,
              "target_met": False, "reasons": [], "first_changed_index": None, "preserved_prefix_bytes": size,
              "fragments": [dict(u) for u in units]}
    return CallRecord(status=200, body={"messages": messages, "compacted": False, "compaction": report},
                      mode="decision", bytes_in=size, bytes_out=size, report=report)
