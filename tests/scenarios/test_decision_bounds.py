"""Decision mode through ``compactor serve``: the 32 000-byte decision bound on non-ASCII text."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Stack
from .helpers import ascii_size, size

BOUND = 32_000


def wire(request: dict[str, Any]) -> dict[str, Any]:
    return {"state": request["state"], "questions": request["questions"]}


def test_decision_bound_is_measured_on_ascii_escaped_text(stack: Stack) -> None:
    # 4 000 "ü": 8 000 UTF-8 bytes, but 24 000 bytes once escaped as \\u00fc on the ASCII wire.
    messages = [{"role": "system", "content": "Sé prudente."}, {"role": "user", "content": "ü" * 4000},
                *({"role": "assistant", "content": f"résultat {i}: " + "ñ" * 150 + "z" * 600} for i in range(2, 12)),
                {"role": "assistant", "content": "Fin."}]
    stack.script.default_choice = "keep"

    body = stack.compact(messages, keep_recent=1)

    decisions = stack.requests("decisions")
    batches = [list(request["questions"]) for request in decisions]
    assert sorted(fid for batch in batches for fid in batch) == sorted(f"fragment_{i}" for i in range(2, 12))
    assert body["compaction"]["reasons"] == []
    for request in decisions:
        assert len(json.dumps(wire(request)).encode()) <= BOUND  # json.dumps default form
    assert max(len(batch) for batch in batches) < 8, batches
    # Every batch that closed early did so because of the ASCII size: measured raw, the next fragment fits.
    by_first = {batch[0]: request for batch, request in zip(batches, decisions)}
    ordered = [by_first[f"fragment_{i}"] for i in range(2, 12) if f"fragment_{i}" in by_first]
    for current, following in zip(ordered, ordered[1:]):
        grown = wire(current)
        grown["state"]["fragments"].append(following["state"]["fragments"][0])
        first = following["state"]["fragments"][0]["id"]
        grown["questions"][first] = following["questions"][first]
        assert ascii_size(grown) > BOUND
        assert size(grown) <= BOUND
