"""A unit too big for one summary record (docs/behaviour.md "Limits and reasons"): a tool output of 60-300 KB is a
candidate like any other. The decider sees its usual excerpt; the summarizer reads its bounded view (the call, the
head and tail of each long output around a ``[… N bytes omitted …]`` line) within a share of the record, and the
summary says it read only part. Before, such a unit was never sent (``not_sent``, the
``fragment_or_decision_context_limit``) and kept whole: the largest tool outputs were exactly the ones never compacted.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from compactor import service
from compactor.budget import Deadline
from compactor.compaction.preparation import MAX_SUMMARY_RECORD_BYTES, REASON_CONTEXT, prepare
from compactor.compaction.preset import question_template
from compactor.formats import get_dialect
from compactor.jsonutil import dense_size, json_text_size
from compactor.models import CompactRequest
from compactor.offline.summarizer import summarize_items
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from fakes.routers import provider_router
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply, decision_reply

FORMATS = ("openai-chat", "anthropic-messages", "openai-responses")
SIZES = (60_000, 100_000, 180_000, 300_000)


def _log(size: int, step: int) -> str:
    lines = [f"running step {step}: pytest src/pkg/module_{step}.py"]
    n = 0
    while sum(len(line) + 1 for line in lines) < size:
        n += 1
        lines.append(f"[{n:06d}] INFO record {n * 7919 % 100_003} of batch {step} ok")
    lines.append(f"FAILED test_module_{step}.py::test_last - AssertionError; exit code 1")
    return "\n".join(lines)


def _transcript(fmt: str, sizes: tuple[int, ...] = SIZES) -> list[dict[str, Any]]:
    """An agent's run in ``fmt``: the task, one call per size with its output of that many bytes, a last word."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing tests in src/pkg."}]
    for step, size in enumerate(sizes):
        call, output = f"call_{step}", _log(size, step)
        command = f"pytest src/pkg/module_{step}.py"
        if fmt == "openai-chat":
            items += [{"role": "assistant", "content": f"Running step {step}.", "tool_calls": [
                          {"id": call, "type": "function",
                           "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
                      {"role": "tool", "tool_call_id": call, "content": output}]
        elif fmt == "anthropic-messages":
            items += [{"role": "assistant", "content": [{"type": "text", "text": f"Running step {step}."},
                                                        {"type": "tool_use", "id": call, "name": "bash",
                                                         "input": {"command": command}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": output}]}]
        else:
            items += [{"type": "function_call", "call_id": call, "name": "bash",
                       "arguments": json.dumps({"command": command})},
                      {"type": "function_call_output", "call_id": call, "output": output}]
    items.append({"role": "assistant", "content": "Done; module_3 still fails."})
    return items


def bounded_entry_limit(record_max: int) -> int:
    """A bounded view's record entry: a quarter of the record, so that four share a batch."""
    return (record_max - 2) // 4 - 1


def _prepare(fmt: str, items: list[dict[str, Any]], **limits: Any) -> Any:
    return prepare(items, keep_recent=1, target_ratio=0.05, pinned_indices=None,
                   question_template=question_template(), dialect=get_dialect(fmt), **limits)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_unit_over_the_summary_record_is_sent_as_its_bounded_view(fmt: str) -> None:
    items = _transcript(fmt)
    before = copy.deepcopy(items)
    prep = _prepare(fmt, items)
    assert REASON_CONTEXT not in prep.reasons
    sent = [c for batch in prep.batches for c in batch.candidates]
    assert len(sent) == len(prep.candidates) >= len(SIZES) - 1  # anthropic-messages: its last result is in the tail
    limit = bounded_entry_limit(MAX_SUMMARY_RECORD_BYTES)
    for cand in sent:
        assert cand.size > MAX_SUMMARY_RECORD_BYTES  # what keeping it costs: the unit as it is
        assert cand.record_bytes == cand.bound_bytes == len(cand.unit.id) + 3 + json_text_size(cand.item) <= limit
        assert getattr(cand, "omitted", 0) > 0 and "bytes omitted …]" in cand.item
        view = json.loads(cand.item)
        text = json.dumps(view)
        assert "pytest src/pkg/module_" in text  # the call
        assert "running step" in text and "FAILED test_module_" in text  # the output's head and its tail
        assert len(cand.evidence) < 1300  # the decider's excerpt, as for any large unit
    for batch in prep.batches:  # batching counts the bounded views
        assert 2 + sum(c.record_bytes for c in batch.candidates) + len(batch.candidates) - 1 <= MAX_SUMMARY_RECORD_BYTES
    assert items == before


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_small_summary_record_bounds_the_view_too(fmt: str) -> None:
    """A summarizer with a small context makes the record smaller (decision.summary_limits): the view fits it."""
    prep = _prepare(fmt, _transcript(fmt, (60_000, 8_000, 9_000)), summary_max_bytes=6_000)
    assert REASON_CONTEXT not in prep.reasons
    sent = [c for batch in prep.batches for c in batch.candidates]
    assert len(sent) == len(prep.candidates) >= 2
    assert all(c.record_bytes <= bounded_entry_limit(6_000) and getattr(c, "omitted", 0) for c in sent)


def test_units_that_fit_keep_their_whole_item() -> None:
    prep = _prepare("openai-chat", _transcript("openai-chat", (20_000, 30_000)))
    sent = [c for batch in prep.batches for c in batch.candidates]
    assert len(sent) == 2 and not any(c.omitted for c in sent)
    assert all("bytes omitted" not in c.item for c in sent)


def test_the_offline_summarizer_says_it_read_part_of_the_output() -> None:
    prep = _prepare("openai-chat", _transcript("openai-chat", (100_000,)))
    (cand,) = [c for batch in prep.batches for c in batch.candidates]
    summary = summarize_items({cand.unit.id: cand.item}, 600)[cand.unit.id]
    assert f"[partial view: {cand.omitted} bytes of this output were not read]" in summary
    assert "$ pytest src/pkg/module_0.py" in summary


@pytest.mark.parametrize("fmt", FORMATS)
async def test_oversized_units_are_summarized_through_the_models(fake_provider: FakeProviderServer, fmt: str) -> None:
    def answer(request: RecordedRequest) -> Reply:
        if request.path.endswith("/decisions"):
            return decision_reply({name: {"type": "choice", "choice": "summarize", "confidence": 1.0}
                                   for name in request.json["questions"]})
        ids = json.loads(request.json["messages"][-1]["content"])
        return chat_reply(json.dumps({key: f"pytest of {key}: failed (saw its head and tail only)" for key in ids}))

    fake_provider.responder = answer
    items = _transcript(fmt)
    field = "input" if fmt == "openai-responses" else "messages"
    request = CompactRequest.model_validate({"format": fmt, field: items, "keep_recent": 1, "target_ratio": 0.05,
                                             "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
    status, body = await service.compact(request, deadline=Deadline.after_ms(60_000),
                                         router=provider_router(fake_provider))
    assert status == 200, body
    report = body["compaction"]
    assert REASON_CONTEXT not in report["reasons"]
    reasons = {f["id"]: f["reason"] for f in report["fragments"]}
    calls = [reasons[f"fragment_{1 + 2 * n}"] for n in range(len(SIZES))]
    assert set(calls) - {"recent_tail"} == {"summarized"} and calls.count("summarized") >= len(SIZES) - 1
    summaries = [r for r in fake_provider.requests if not r.path.endswith("/decisions")]
    assert summaries and all(len(r.body) < MAX_SUMMARY_RECORD_BYTES + 20_000 for r in summaries)
    assert all("say that the rest of that output was not read" in r.json["messages"][0]["content"] for r in summaries)
    assert all("bytes omitted …]" in r.json["messages"][-1]["content"] for r in summaries)
    assert report["output_bytes"] < 0.5 * dense_size(items)
    out = body[field]
    assert out[0] == items[0] and out[-1] == items[-1]  # kept items byte-identical


@pytest.mark.usefixtures("bundled_catalog")
def test_an_8_mb_transcript_of_large_outputs_is_answered_within_the_response_limit(compact_module: Any) -> None:
    """The review's case: decision mode on 8 MB of 100-300 KB tool outputs answered 413 ``response_too_large``."""
    from compactor import http_api

    from reliability.conftest import post

    items = _transcript("openai-chat", SIZES * 10)
    raw = json.dumps({"messages": items, "mode": "decision"}).encode()
    assert len(raw) > 6_000_000
    status, text = post(compact_module, "compact", raw)
    assert status == 200, text[:300]
    body = json.loads(text)
    assert len(text) < http_api.MAX_RESPONSE_BYTES
    assert REASON_CONTEXT not in body["compaction"]["reasons"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_middle_lines_naming_what_later_messages_use_stay(fmt: str) -> None:
    """A line deep in the middle of a long output that names what a later message uses again (the salience scan's
    names) stays in the bounded view, between markers; the routine lines around it do not."""
    items = _transcript(fmt, (150_000, 150_000))
    output = items[2]["content"] if fmt == "openai-chat" else (
        items[2]["content"][0]["content"] if fmt == "anthropic-messages" else items[2]["output"])
    lines = output.split("\n")
    middle = len(lines) // 2
    lines[middle] = "WARNING: src/pkg/config_loader.py:412 parse_config_value returned None for 'timeout'"
    changed = "\n".join(lines)
    if fmt == "openai-chat":
        items[2]["content"] = changed
    elif fmt == "anthropic-messages":
        items[2]["content"][0]["content"] = changed
    else:
        items[2]["output"] = changed
    items.insert(-1, {"role": "user", "content": "Look at parse_config_value in src/pkg/config_loader.py first."})
    prep = _prepare(fmt, items)
    cand = next(c for batch in prep.batches for c in batch.candidates if c.unit.start == 1)
    text = json.loads(cand.item)
    shown = json.dumps(text, ensure_ascii=False)
    assert "parse_config_value returned None" in shown
    assert shown.count("bytes omitted …]") >= 2  # a marker on each side of the kept line
    assert lines[middle + 3] not in shown and lines[middle - 3] not in shown
    assert len(cand.unit.id) + 3 + json_text_size(cand.item) == cand.record_bytes <= bounded_entry_limit(
        MAX_SUMMARY_RECORD_BYTES)
    for batch in prep.batches:
        assert batch.record_bytes == sum(c.record_bytes for c in batch.candidates)


def test_the_offline_summary_says_once_how_much_it_did_not_read() -> None:
    text = "\n".join(["head line", "[… 1000 bytes omitted …]", "ERROR: parse_config_value failed",
                      "[… 2500 bytes omitted …]", "tail line"])
    item = json.dumps([{"role": "tool", "tool_call_id": "c", "content": text}], ensure_ascii=False)
    summary = summarize_items({"fragment_1": item}, 400)["fragment_1"]
    assert summary.count("[partial view:") == 1
    assert "[partial view: 3500 bytes of this output were not read]" in summary
    assert "ERROR: parse_config_value failed" in summary
