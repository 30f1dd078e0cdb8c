"""Decision mode through ``compactor serve``: the 32 000-byte decision bound on non-ASCII text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import Stack
from .helpers import ascii_size, flow_nodes, size, summary

BOUND = 32_000


def wire(request: dict[str, Any]) -> dict[str, Any]:
    return {"state": request["state"], "questions": request["questions"]}


def test_decision_bound_is_measured_on_ascii_escaped_text(stack: Stack) -> None:
    # The recent evidence every batch carries is non-ASCII: each "ñ" costs 2 UTF-8 bytes but 6 once escaped
    # as \\u00f1 on the ASCII wire, so measured raw, 8 fragments would fit a batch; measured as sent, fewer do.
    messages = [{"role": "system", "content": "é" * 100}, {"role": "user", "content": "ü" * 90},
                *({"role": "assistant", "content": f"résultat {i}: " + "ñ" * 250 + "z" * 500} for i in range(2, 12)),
                *({"role": "assistant", "content": f"récent {i}: " + "ñ" * 985} for i in range(3)),
                {"role": "assistant", "content": "Fin."}]
    stack.script.default_choice = "keep"

    body = stack.compact(messages, keep_recent=4)

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


def test_more_than_128_candidates_keeps_the_extra_ones(stack: Stack) -> None:
    # Candidates of one size: the largest 128 (docs/differences.md) are the first 128.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go."},
                *({"role": "assistant", "content": f"step {i:03d} " + "s" * 200} for i in range(2, 132)),
                {"role": "assistant", "content": "Done."}]
    stack.script.default_choice = "archive"

    body = stack.compact(messages, keep_recent=1)

    assert body["compaction"]["reasons"] == ["fragment_limit"]
    asked = [fid for request in stack.requests("decisions") for fid in request["questions"]]
    assert sorted(asked, key=lambda fid: int(fid[9:])) == [f"fragment_{i}" for i in range(2, 130)]
    assert body["messages"] == [*messages[:2], messages[130], messages[131], messages[132]]
    assert [f["action"] for f in body["compaction"]["fragments"][128:]] == ["archive", "archive", "keep", "keep", "keep"]


def test_more_than_32_batches_keeps_the_fragments_of_the_extra_ones(stack: Stack) -> None:
    # Items of ~25 KB: two never fit one batch's 50 000-byte summary record, so each makes its own batch.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go."},
                *({"role": "assistant", "content": f"dump {i} " + "d" * 25_000} for i in range(2, 35)),
                {"role": "assistant", "content": "Done."}]

    body = stack.compact(messages, keep_recent=1)

    assert body["compaction"]["reasons"] == ["batch_limit"]
    decisions = stack.requests("decisions")
    assert len(decisions) == 32 and all(len(request["questions"]) == 1 for request in decisions)
    assert "fragment_34" not in {fid for request in decisions for fid in request["questions"]}
    assert len(stack.requests("summaries")) == 32
    assert body["messages"] == [*messages[:2], *(summary(f"fragment_{i}", f"Evidence fragment_{i}")
                                                 for i in range(2, 34)), messages[34], messages[35]]
    assert len(flow_nodes(body)) == 32 * 7 + 1


@pytest.mark.parametrize("max_tokens, sent", [(None, 512), (0, 512), (100, 100), (5000, 4096)])
def test_summary_max_tokens(stack: Stack, max_tokens: int | None, sent: int) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go."},
                {"role": "assistant", "content": "x" * 3000}, {"role": "assistant", "content": "Done."}]

    stack.compact(messages, keep_recent=1, max_tokens=max_tokens)

    request, = stack.requests("summaries")
    assert request["max_tokens"] == sent
