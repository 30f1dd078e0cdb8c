"""The window planner: windows fit one request's limits, units stay whole, pins and tail are
untouched, and the result does not depend on where or in which order windows run."""

from __future__ import annotations

import asyncio
import io
import json
import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from compactor.budget import Deadline
from compactor.chat import has_tool_calls, role_of
from compactor.compaction.preparation import (
    MAX_CANDIDATES, BatchSizer, candidate, fit_batches, prepare)
from compactor.compaction.preset import question_template
from compactor.compaction.units import split_units
from compactor.compaction.windowed import compact_in_memory, compact_stream, inline_runner, run_record
from compactor.compaction.windows import (
    MAX_PASSES, Settings, compact_window, compact_windowed, group_units, scan, windows)
from compactor.jsonutil import dense_size
from compactor.models import CompactRequest

from fakes.routers import frozen_router

from .conftest import decision_policy


def settings(**kw: Any) -> Settings:
    return Settings(decision_policy_ir=decision_policy(), **kw)


def plan(messages: list[dict[str, Any]], s: Settings) -> list[dict[str, Any]]:
    return list(windows(messages, scan(messages, s), s))


def test_windows_cover_the_transcript_in_order_on_unit_boundaries(sessions):
    tasks = plan(sessions, settings())
    assert len(tasks) >= 3
    assert [m for t in tasks for m in t["messages"]] == sessions
    starts = {u.start for u in split_units(sessions)}
    assert all(t["offset"] in starts for t in tasks)
    assert [t["index"] for t in tasks] == list(range(len(tasks)))


def test_every_window_fits_one_request_and_the_planner_packs_them(sessions):
    s = settings()
    context = scan(sessions, s)
    template = question_template()
    for task in windows(sessions, context, s):
        offset = task["offset"]
        units = [u for u in split_units(task["messages"]) if u.start + offset not in set(task["protected"])]
        reasons: list[str] = []
        sizer = BatchSizer(task["instructions"], task["recent_evidence"])
        cands = [candidate(u, task["messages"][u.start:u.end], template) for u in units]
        batches = fit_batches(iter(cands), sizer, reasons)
        assert len(cands) <= MAX_CANDIDATES
        assert set(reasons) <= {"fragment_or_decision_context_limit"}, reasons
        assert sum(len(b.candidates) for b in batches) == len(cands) - reasons.count("fragment_or_decision_context_limit")
    # A window closes only when the next unit would not fit: merging two neighbours breaks a limit.
    tasks = list(windows(sessions, context, s))
    for left, right in zip(tasks, tasks[1:]):
        merged = {**left, "messages": left["messages"] + right["messages"]}
        offset = merged["offset"]
        protected = set(left["protected"]) | set(right["protected"])
        units = [u for u in split_units(merged["messages"]) if u.start + offset not in protected]
        reasons = []
        cands = [candidate(u, merged["messages"][u.start:u.end], template) for u in units]
        fit_batches(iter(cands), BatchSizer(left["instructions"], left["recent_evidence"]), reasons)
        assert len(cands) > MAX_CANDIDATES or set(reasons) - {"fragment_or_decision_context_limit"}


@pytest.mark.parametrize("bounded", [False, True])
def test_scan_agrees_with_single_request_preparation(sessions, bounded):
    messages = sessions[:40]
    s = settings(keep_recent=3, bounded_tail=bounded)
    context = scan(messages, s)
    prep = prepare(messages, keep_recent=3, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template(), bounded=bounded)
    assert context.input_bytes == prep.original_bytes == dense_size(messages)
    assert context.target_bytes == prep.target_bytes
    assert context.recent_evidence == prep.recent_evidence
    assert context.budget == prep.budget
    assert {u.id for u in prep.units if context.protected(u)} == prep.protected


def test_windows_show_the_pins_as_one_request_does():
    """A window's decisions see the pinned messages as one request's do (``instructions_view``: role and content text,
    bounded). They went whole: a harness's own fields and hidden reasoning on a pinned message reached the decision
    model in every window (docs/differences.md: models see the format's model view)."""
    messages = [{"role": "system", "content": "be terse", "x_harness": {"raw_response": "RAW-RESPONSE"}},
                {"role": "user", "content": "fix it " * 700, "reasoning_content": "HIDDEN-REASONING", "timing_ms": 12}]
    for i in range(6):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                         "name": "bash", "arguments": json.dumps({"command": f"cat f{i}.py"})}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1\n" * 300}]
    messages.append({"role": "assistant", "content": "done"})
    s = settings(keep_recent=2)
    (task,) = plan(messages, s)
    prep = prepare(messages, keep_recent=2, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    assert task["instructions"] == prep.instructions
    sent: list[str] = []

    async def runner(admitted, flow_input, **kw):
        from compactor.flow import run_flow

        sent.append(json.dumps(flow_input))
        return await run_flow(admitted, flow_input, **kw)

    result = run(compact_window(task, router=frozen_router(), deadline=Deadline.after_ms(60_000), flow_runner=runner))
    assert sent and result["actions"]["keep"] < 8
    assert not [word for word in ("RAW-RESPONSE", "HIDDEN-REASONING", "timing_ms") if word in sent[0]]


def test_windows_show_a_long_task_as_one_request_does():
    """A pin counted against the instructions' 8,000 bytes by its whole size: a task over them (a pasted spec), which
    one request shows the first 3,000 characters of, was in no window's instructions. It counts by what its entry
    shows now, so every window shows it as one request does."""
    messages = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "Implement: " + "rule. " * 2000}]
    for i in range(6):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                         "name": "bash", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1\n" * 300}]
    prep = prepare(messages, keep_recent=2, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    assert [m["role"] for m in prep.instructions] == ["system", "user"]
    assert scan(messages, settings(keep_recent=2)).instructions == prep.instructions


@pytest.mark.parametrize("length", [0, 599, 600, 601, 2999, 3000, 3001, 5999, 6000, 6001, 50_000])
def test_a_pin_text_held_by_its_ends_shows_what_the_whole_text_shows(length):
    """The scan holds a pin's text by its ends (``pin_text``): the instructions it makes are those of the whole
    texts, for the task and the other pins, at every excerpt length the bound leads to."""
    from compactor.compaction.preparation import TASK_VIEW_CHARS, pin_text, pins_view

    text = "".join(chr(0x41 + i % 26) for i in range(length))
    for count in (1, 3, 12):  # more pins, shorter excerpts
        messages = [{"role": "user", "content": text}, *[{"role": "system", "content": text[k:]} for k in range(count)]]
        held = [pin_text(m) for m in messages]
        assert all(len(h[1]) <= 2 * TASK_VIEW_CHARS for h in held)
        assert pins_view(held) == pins_view([(m["role"], m["content"], len(m["content"])) for m in messages])


@pytest.mark.parametrize("pins", [None, [], [1, 7]])
def test_scan_pins_what_one_request_pins(sessions, pins):
    from compactor.compaction.units import instruction_pins

    messages = sessions[:120]
    context = scan(messages, settings(pinned_indices=None if pins is None else tuple(pins)))
    assert sorted(context.pins) == instruction_pins(messages, pins)
    assert any(role_of(messages[i]) == "system" for i in context.pins)


messages_strategy = st.lists(st.sampled_from([
    {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                           "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c", "content": "r"}, {"role": "system", "content": "s"}]), max_size=30)


@hsettings(max_examples=200, deadline=None)
@given(messages_strategy)
def test_streamed_units_are_the_units(messages):
    assert [u for u, _ in group_units(iter(messages))] == split_units(messages)
    assert [m for _, ms in group_units(messages) for m in ms] == messages


def run(coro):
    return asyncio.run(coro)


def _check_invariants(original: list[dict[str, Any]], output: list[dict[str, Any]], keep_recent: int,
                      pins: list[int] | None = None) -> None:
    """Pinned messages and the tail survive in order; every tool result still follows its call."""
    pinned = [m for i, m in enumerate(original) if role_of(m) in ("system", "developer")
              or (i in pins if pins is not None else role_of(m) == "user")]
    assert [m for m in output if m in pinned] == pinned
    assert output[-keep_recent:] == original[-keep_recent:]
    open_calls: set[str] = set()
    for message in output:
        if role_of(message) == "tool":
            assert message["tool_call_id"] in open_calls
            continue
        open_calls = {c["id"] for c in message.get("tool_calls") or []} if has_tool_calls(message) else set()


def test_in_memory_run_shrinks_and_keeps_invariants(sessions):
    request = CompactRequest.model_validate({"messages": sessions, "decision_policy_ir": decision_policy()})
    router = frozen_router()
    record = run(compact_in_memory(request, router=router, run_window=inline_runner(router, window_budget_ms=60_000)))
    body, compaction = record.body, record.report
    assert body["compaction"] == compaction and record.model_calls > 0 and record.cost_known
    assert (record.bytes_in, record.bytes_out) == (compaction["original_bytes"], compaction["output_bytes"])
    assert compaction["output_bytes"] == dense_size(body["messages"]) < 0.5 * dense_size(sessions)
    assert compaction["original_bytes"] == dense_size(sessions)
    passes = compaction["windows"]["passes"]
    assert 1 <= len(passes) <= MAX_PASSES and passes[0]["windows"] >= 3
    first = compaction["first_changed_index"]
    assert body["messages"][:first] == sessions[:first] and body["messages"][first] != sessions[first]
    assert compaction["preserved_prefix_bytes"] == dense_size(sessions[:first])
    _check_invariants(sessions, body["messages"], 6)


def test_explicit_pins_survive_every_pass(sessions):
    pins = [5, 17, 300, len(sessions) - 20]
    request = CompactRequest.model_validate({"messages": sessions, "decision_policy_ir": decision_policy(),
                                             "pinned_indices": pins, "keep_recent": 2})
    router = frozen_router()
    body = run(compact_in_memory(request, router=router, run_window=inline_runner(router, window_budget_ms=60_000))).body
    assert len(body["compaction"]["windows"]["passes"]) >= 2
    _check_invariants(sessions, body["messages"], 2, pins)


def _roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_identical_inline_and_as_shuffled_json_workers(sessions):
    """Windows as separate JSON jobs finishing in any order give the inline bytes."""
    s = settings()
    router = frozen_router()

    async def inline(task):
        return await compact_window(task, router=router, deadline=Deadline.after_ms(60_000))

    async def worker(task):  # what a Distributed Map worker sees and answers: JSON only
        await asyncio.sleep(random.random() / 100)
        result = await compact_window(_roundtrip(task), router=frozen_router(), deadline=Deadline.after_ms(60_000))
        return _roundtrip(result)

    random.seed(7)
    a = run(compact_windowed(lambda: sessions, s, run_window=inline, concurrency=1))
    b = run(compact_windowed(lambda: sessions, s, run_window=worker, concurrency=8))
    assert json.dumps(list(a.source())) == json.dumps(list(b.source()))
    assert a.compaction == b.compaction


def test_a_failed_window_keeps_its_original(sessions):
    s = settings()
    router = frozen_router()

    failed: list[int] = []

    async def flaky(task):  # the second window of the first pass fails
        if task["index"] == 1 and not failed:
            failed.append(1)
            return None
        return await compact_window(task, router=router, deadline=Deadline.after_ms(60_000))

    tasks = plan(sessions, s)
    out = run(compact_windowed(lambda: sessions, s, run_window=flaky, concurrency=2))
    passes = out.compaction["windows"]["passes"]
    assert [p["failed_windows"] for p in passes] == [1] + [0] * (len(passes) - 1)
    # Its worker may have paid for model calls before it failed: the job's cost is unknown, not the others' sum.
    assert out.state.cost_usd is None and run_record(out.state).cost_usd is None
    whole = run(compact_windowed(lambda: sessions, s, run_window=lambda task: compact_window(
        task, router=router, deadline=Deadline.after_ms(60_000)), concurrency=2))
    assert whole.state.cost_usd is not None
    # Its units were still there for the next pass to compact; pass 1 alone keeps them verbatim.
    one_pass = run(compact_windowed(lambda: sessions, Settings(**{**s.__dict__, "target_ratio": 1.0}),
                                    run_window=lambda t: _fail_second(t, router)))
    second = tasks[1]["messages"]
    output = list(one_pass.source())
    assert len(one_pass.compaction["windows"]["passes"]) == 1
    assert any(output[i:i + len(second)] == second for i in range(len(output)))


async def _fail_second(task, router):
    if task["index"] == 1:
        return None
    return await compact_window(task, router=router, deadline=Deadline.after_ms(60_000))


def test_passes_stop_without_progress(sessions):
    s = settings()
    calls: list[int] = []

    async def keep_all(task):
        calls.append(task["index"])
        return {"index": task["index"], "messages": task["messages"], "reasons": [], "ok": True,
                "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0,
                "actions": {"keep": len(split_units(task["messages"])), "summarize": 0, "archive": 0}}

    out = run(compact_windowed(lambda: sessions, s, run_window=keep_all))
    assert len(out.compaction["windows"]["passes"]) == 1
    assert out.compaction["first_changed_index"] is None and out.compaction["output_bytes"] == dense_size(sessions)
    assert list(out.source()) == sessions


def test_streamed_run_writes_what_the_in_memory_run_returns(sessions, tmp_path):
    request = CompactRequest.model_validate({"messages": sessions, "decision_policy_ir": decision_policy()})
    router = frozen_router()
    record = run(compact_in_memory(request, router=router, run_window=inline_runner(router, window_budget_ms=60_000)))
    path = tmp_path / "in.json"
    path.write_text(json.dumps(sessions))
    out = io.StringIO()
    streamed_record = run(compact_stream(lambda: open(path, "rb"), Settings.from_request(request), router=router,
                                         run_window=inline_runner(router, window_budget_ms=60_000), out=out,
                                         messages_only=False, workdir=str(tmp_path)))
    streamed = json.loads(out.getvalue())
    assert streamed == record.body
    assert streamed_record.report == record.report and "messages" not in streamed_record.body
    assert streamed_record == replace(record, body=streamed_record.body)  # the same facts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json"]  # pass files are gone


def test_inadmissible_policy_fails_before_any_window(sessions):
    request = CompactRequest.model_validate({"messages": sessions, "decision_policy_ir": ["policy", ["nonsense"]]})
    from compactor.flow import FlowAdmissionError

    ran: list[int] = []

    async def record(task):
        ran.append(1)

    with pytest.raises(FlowAdmissionError):
        run(compact_in_memory(request, router=frozen_router(), run_window=record))
    assert ran == []


def test_a_windowed_runs_record_says_how_its_cost_was_found(sessions):
    """docs/billing.md: the record of a windowed run (a windowed job's, an inline one's) has the cost basis an
    inline compaction's has: ``reported`` (summed from the flows' nodes) when the cost is known and a model was
    called, else none. It had none whatever the cost, and the report said "no basis" for a known cost."""
    request = CompactRequest.model_validate({"messages": sessions, "decision_policy_ir": decision_policy()})
    router = frozen_router()
    record = run(compact_in_memory(request, router=router, run_window=inline_runner(router, window_budget_ms=60_000)))
    assert record.model_calls > 0 and record.cost_known and record.cost_basis == "reported"
    s = settings()
    failed = run(compact_windowed(lambda: sessions, s, run_window=lambda task: _none(), concurrency=2))
    assert run_record(failed.state).cost_usd is None and run_record(failed.state).cost_basis is None


async def _none() -> None:
    return None


def _long_output_run(fmt: str, later_word: str, steps_between: int = 0) -> list[dict[str, Any]]:
    """A task, a call whose output (150 KB) is too big for one summary record with a line deep in its middle naming
    src/pkg/config_loader.py and parse_config_value, ``steps_between`` small calls, then ``later_word`` from the user
    and a last word."""
    lines = ["running step 0"] + [f"[{n:06d}] INFO record {n * 7919 % 100_003} ok" for n in range(1, 3600)]
    lines[len(lines) // 2] = "WARNING: src/pkg/config_loader.py:412 parse_config_value returned None"
    outputs = ["\n".join(lines + ["FAILED test_module.py::test_last; exit code 1"])]
    outputs += [f"step {step}: ok\n" * 20 for step in range(1, steps_between + 1)]
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing tests in src/pkg."}]
    for step, output in enumerate(outputs):
        call, command = f"call_{step}", {"command": f"pytest tests/test_{step}.py"}
        if fmt == "openai-chat":
            items += [{"role": "assistant", "content": f"Running step {step}.", "tool_calls": [
                          {"id": call, "type": "function",
                           "function": {"name": "bash", "arguments": json.dumps(command)}}]},
                      {"role": "tool", "tool_call_id": call, "content": output}]
        else:
            items += [{"role": "assistant", "content": [{"type": "text", "text": f"Running step {step}."},
                                                        {"type": "tool_use", "id": call, "name": "bash",
                                                         "input": command}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": output}]}]
    return items + [{"role": "user", "content": later_word}, {"role": "assistant", "content": "Done."}]


def _sent_item(task: dict[str, Any], unit_id: str) -> str:
    """The item the window's flow sends to summarize for ``unit_id``."""
    sent: list[dict[str, Any]] = []

    async def runner(admitted, flow_input, **kw):
        from compactor.flow import run_flow

        sent.append(flow_input)
        return await run_flow(admitted, flow_input, **kw)

    run(compact_window(json.loads(json.dumps(task)), router=frozen_router(), deadline=Deadline.after_ms(60_000),
                       flow_runner=runner))
    return next(batch["items"][unit_id] for batch in sent[0].values() if unit_id in batch["items"])


@pytest.mark.parametrize("steps_between", [0, 140])
@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic-messages"])
def test_a_windows_bounded_view_keeps_the_middle_lines_later_messages_name(fmt, steps_between):
    """A unit too big for one summary record is sent as its bounded view (docs/offline-offers.md "Units too big for
    one record"). One request puts back the lines of its middle naming what a later message uses; a window sent the
    head and tail only, so the warning a later message asks about was not read. The scan now finds the last message
    using each name, and a window's task names what of its bounded units later messages use, of this window or a
    later one (140 steps between: the question is in the next window): the window sends one request's view."""
    from compactor.formats import get_dialect

    items = _long_output_run(fmt, "Look at parse_config_value in src/pkg/config_loader.py first.", steps_between)
    s = settings(keep_recent=1, format=fmt)
    tasks = list(windows(items, scan(items, s, reread=lambda: items), s))
    assert len(tasks) == (1 if not steps_between else 2)
    assert tasks[0]["used_names"] == {"fragment_1": ["parse_config_value", "src/pkg/config_loader.py"]}
    item = _sent_item(tasks[0], "fragment_1")
    assert "parse_config_value returned None" in item and item.count("bytes omitted …]") >= 2
    prep = prepare(items, keep_recent=1, target_ratio=0.1, pinned_indices=None, question_template=question_template(),
                   dialect=get_dialect(fmt), bounded=True)
    assert item == next(c.item for b in prep.batches for c in b.candidates if c.unit.id == "fragment_1")
    # Named by no later message, the line is not put back (the head and tail take the room), as before.
    quiet = _long_output_run(fmt, "Carry on.", steps_between)
    tasks = list(windows(quiet, scan(quiet, s, reread=lambda: quiet), s))
    assert "used_names" not in tasks[0]
    item = _sent_item(tasks[0], "fragment_1")
    assert "parse_config_value" not in item and "bytes omitted" in item


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic-messages"])
def test_a_pass_keeps_the_later_uses_of_its_bounded_views_names_only(fmt):
    """The scan kept the last message using every name of the transcript, so a pass's memory grew with its distinct
    names (93 MB against 57 at 500 MB in large_transcripts.py) and every message was read for names. It now watches
    only the names of units sent as bounded views, from the first such unit on: a pass without one keeps none."""
    from compactor.compaction.preparation import view_names
    from compactor.formats import get_dialect

    s = settings(keep_recent=1, format=fmt)
    small = _long_output_run(fmt, "Look at parse_config_value in src/pkg/config_loader.py first.")
    small[2] = {**small[2], "content": "short output naming src/pkg/other_module.py"} if fmt == "openai-chat" else {
        **small[2], "content": [{"type": "tool_result", "tool_use_id": "call_0",
                                 "content": "short output naming src/pkg/other_module.py"}]}
    assert scan(small, s, reread=lambda: small).last_use == {}
    items = _long_output_run(fmt, "Look at parse_config_value in src/pkg/config_loader.py first.", 3)
    context = scan(items, s, reread=lambda: items)
    dialect = get_dialect(fmt)
    big_unit_names = view_names(items[1], dialect) | view_names(items[2], dialect)
    assert set(context.last_use) <= big_unit_names
    assert context.last_use["parse_config_value"] == len(items) - 2
