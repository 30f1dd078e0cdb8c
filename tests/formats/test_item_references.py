"""``openai-responses`` item references (``{"type": "item_reference", "id": …}``, the ``type`` optional): an input
item standing for an item the API stored from an earlier response, a call, its reasoning, a message. A reference
is never parted from the outputs answering the call it stands for, from the items of the response it may be the
reasoning of, or from the item it names when that item is in the input too (docs/formats.md)."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor.compaction.mask import mask
from compactor.compaction.seal import plan_seal
from compactor.formats import get_dialect
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event, decision_policy
from .validity import cdump

RESPONSES = get_dialect("openai-responses")


def _spans(items: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(u.start, u.end) for u in RESPONSES.split_units(items)]


def _cycle(n: int) -> list[dict[str, Any]]:
    return [{"type": "reasoning", "id": f"rs_{n}", "summary": []},
            {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "shell",
             "arguments": json.dumps({"cmd": f"cat src/file{n}.py"})},
            {"type": "function_call_output", "call_id": f"call_{n}", "output": f"line {n} of the file " * 60}]


def _referenced(n: int, *, typed: bool = True) -> list[dict[str, Any]]:
    """A stored response's reasoning and call sent back by reference, and the call's output in full."""
    kind = {"type": "item_reference"} if typed else {}
    return [{**kind, "id": f"rs_ref{n}"}, {**kind, "id": f"fc_ref{n}"},
            {"type": "function_call_output", "call_id": f"call_ref{n}", "output": f"referenced output {n} " * 60}]


def test_a_referenced_call_keeps_its_outputs_and_a_reference_what_follows_it() -> None:
    """Before, each reference was a unit of its own and so was the output of the call it stands for (its call is
    in no item of the input): decision could summarize the reference and keep the output ("No tool call found for
    function call output"), or part a referenced reasoning from the call after it."""
    items = [{"role": "user", "content": "go"}, *_referenced(1),
             {"type": "item_reference", "id": "fc_ref2"}, {"type": "item_reference", "id": "fc_ref3"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "between"}]},
             {"type": "function_call_output", "call_id": "call_ref2", "output": "two"},
             {"type": "function_call_output", "call_id": "call_ref3", "output": "three"},
             {"role": "user", "content": "next"}]
    assert _spans(items) == [(0, 1), (1, 4), (4, 9), (9, 10)]


def test_an_output_answers_a_reference_of_its_own_turn_only() -> None:
    """An output whose call is nowhere (lost) after a human turn takes in no reference of an earlier turn."""
    items = [{"type": "item_reference", "id": "msg_1"}, {"role": "user", "content": "go"},
             {"type": "function_call_output", "call_id": "lost", "output": "x"}, {"role": "user", "content": "next"}]
    assert _spans(items) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_an_item_reference_without_its_type_is_a_reference() -> None:
    """The API's item reference has an optional ``type``: ``{"id": …}`` was refused (an item needs a type)."""
    items = [{"role": "user", "content": "go"}, *_referenced(1, typed=False)]
    RESPONSES.validate(items)
    assert _spans(items) == [(0, 1), (1, 4)]


def test_a_reference_to_an_item_of_the_input_stays_with_it() -> None:
    items = [{"role": "user", "content": "go"},
             {"type": "message", "id": "msg_1", "role": "assistant",
              "content": [{"type": "output_text", "text": "a plan"}]},
             {"role": "user", "content": "and?"},
             {"type": "item_reference", "id": "msg_1"},
             {"role": "user", "content": "go on"}]
    assert _spans(items) == [(0, 1), (1, 4), (4, 5)]


def _session() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "read the sources"}]
    for n in range(4):
        items += _cycle(n)
    items += _referenced(1)
    for n in range(4, 8):
        items += _cycle(n)
    items += _referenced(2)
    for n in range(8, 10):
        items += _cycle(n)
    return items


def _answered_by_reference(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each output whose call is in no item, with the references before it (what stands for that call)."""
    found, references = {}, []
    for item in items:
        if item.get("type", "item_reference") == "item_reference" and "role" not in item:
            references.append(cdump(item))
        elif item.get("type") == "function_call_output" and item["call_id"].startswith("call_ref"):
            found[item["call_id"]], references = references, []
        else:
            references = []
    return found


def _references_kept_with_their_outputs(items: list[dict[str, Any]], output: list[dict[str, Any]]) -> None:
    texts = [cdump(item) for item in output]
    for call_id, references in _answered_by_reference(items).items():
        at = next((i for i, item in enumerate(output) if item.get("call_id") == call_id), None)
        if at is None:  # the output went (summarized or sealed): so did its references
            assert not set(references) & set(texts), call_id
        else:  # kept: its references right before it, as they were
            assert texts[at - len(references):at] == references, call_id


@pytest.mark.parametrize("mode", ["decision", "seal"])
def test_decision_and_seal_keep_references_with_the_outputs_of_their_calls(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, mode: str) -> None:
    items = _session()
    body: dict[str, Any] = {"format": "openai-responses", "input": items, "mode": mode}
    body |= {"keep_recent": 1, "target_ratio": 0.01, "decision_policy_ir": decision_policy()} if mode == "decision" \
        else {"keep_recent": 7}  # the tail's first item: the second referenced call's output
    response = compact_module.handler(api_event("/compact", body), lambda_context)
    assert response["statusCode"] == 200, response["body"]
    answer = json.loads(response["body"])
    assert answer["compacted"] is True
    _references_kept_with_their_outputs(items, answer["input"])
    plan = plan_seal(items, keep_recent=7, dialect=RESPONSES)
    assert plan is not None and plan.recent == items[-9:]  # the tail starts with the output's references


def test_mask_keeps_the_references() -> None:
    items = _session()
    output, masked = mask(items, keep_recent=1, pinned_indices=[], dialect=RESPONSES)
    assert masked and [item for item in output if item.get("type") == "item_reference"] == [
        item for item in items if item.get("type") == "item_reference"]


def test_a_file_of_items_with_bare_references_reads_as_responses() -> None:
    """JSONL refused a line without a role or a type, and the stream read a bare reference as chat (or failed on
    it) where it refuses other Responses items, so that the CLI reads the file whole."""
    import io

    from compactor.transcript_stream import messages_from
    from compactor.transcripts import NotChat, read_transcript

    typed = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
             *_referenced(1, typed=False)]
    short = [{"role": "user", "content": "go"}, {"id": "fc_1"}]
    for items in (typed, short):
        for text in ("\n".join(json.dumps(item) for item in items), json.dumps(items)):
            transcript = read_transcript(text)
            assert (transcript.format, transcript.items) == ("openai-responses", items), text
    for text in ("\n".join(json.dumps(item) for item in [{"role": "user", "content": "go"}, {"id": "fc_1"}]),
                 json.dumps([{"role": "user", "content": "go"}, {"id": "fc_1"}])):
        with pytest.raises(NotChat, match="(line 2|message 1) is an openai-responses item"):
            list(messages_from(lambda text=text: io.BytesIO(text.encode())))


def _history_by_reference(turns: int) -> list[dict[str, Any]]:
    """An agent sending its earlier turns back as references to what the API stored (the user's messages, the
    reasoning, the answers: ``msg_`` and ``rs_`` ids), then a new prompt and a call of its own."""
    items: list[dict[str, Any]] = []
    for n in range(turns):
        items += [{"type": "item_reference", "id": f"msg_user{n}"}, {"type": "item_reference", "id": f"rs_{n}"},
                  {"type": "item_reference", "id": f"msg_answer{n}"}]
    return [*items, {"role": "user", "content": "now the tests"}, *_cycle(99),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]


def test_a_run_of_references_is_not_one_unit_and_follows_what_it_stands_for() -> None:
    """A run of references was one unit (each joined the next), and took in the call after it: a decision about that
    call covered every stored item the run stood for. A reference standing for reasoning (``rs_``) leads into the
    item after it, one standing for a message (``msg_``) joins nothing by itself."""
    items = _history_by_reference(20)
    spans = _spans(items)
    assert spans[:3] == [(0, 1), (1, 3), (3, 4)]  # the user's message; the reasoning with its answer; the next one
    assert (61, 64) in spans  # the new call with its reasoning and output, alone


@pytest.mark.parametrize("mode", ["decision", "seal"])
def test_units_of_nothing_but_references_are_kept(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                                   mode: str) -> None:
    """A unit of nothing but references to items the API stored was compactable: the decider read only their ids
    (short enough to be archived whole), and a summary or an archive dropped the stored items unseen; seal sealed
    them. They are always protected now, like the system-like items: the call of the input is compacted as before."""
    items = _history_by_reference(20)
    assert RESPONSES.always_pinned(items) == set(range(60))
    body: dict[str, Any] = {"format": "openai-responses", "input": items, "mode": mode, "keep_recent": 1}
    if mode == "decision":
        body |= {"target_ratio": 0.01, "decision_policy_ir": decision_policy(), "pinned_indices": []}
    response = compact_module.handler(api_event("/compact", body), lambda_context)
    assert response["statusCode"] == 200, response["body"]
    answer = json.loads(response["body"])
    assert answer["compacted"] is True
    assert [item for item in answer["input"] if item.get("type") == "item_reference"] == items[:60]
    if mode == "decision":
        fragments = answer["compaction"]["fragments"]
        assert all(f["action"] == "keep" and f["reason"] == "pinned" for f in fragments if f["end"] <= 60)
        assert any(f["action"] != "keep" for f in fragments if f["start"] >= 61)


def _calls_by_reference(turns: int, prefix: str) -> list[dict[str, Any]]:
    """An agent sending its earlier calls back as references whose ids do not say what they stand for (``fc_``, or
    a prefix the API never documented), then a new call of its own, answered, and an answer."""
    return [{"role": "user", "content": "go on"},
            *({"type": "item_reference", "id": f"{prefix}{n}"} for n in range(turns)),
            *_cycle(99)[1:],
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]


@pytest.mark.parametrize("prefix", ["fc_", "ctc_", "item_"])
def test_a_run_of_references_of_unknown_kind_stays_apart_from_the_input_items_around_it(prefix: str) -> None:
    """References whose id has no known prefix joined the next call or message as well as the next reference: a run
    of them was one unit with the new call after it (and the call's output and the answer after that), compactable,
    so a decision about that call summarized every stored item the run stood for by its ids. As ``rs_`` and ``msg_``
    references follow what they stand for, a reference that may stand for anything now joins only the references
    of unknown kind next to it (one response's stored items, always protected), no item of the input."""
    items = _calls_by_reference(5, prefix)
    assert _spans(items) == [(0, 1), (1, 6), (6, 8), (8, 9)]
    assert RESPONSES.always_pinned(items) == set(range(1, 6))
    before_the_run = [{"role": "user", "content": "go on"},
                      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                      *items[1:]]
    assert _spans(before_the_run)[:3] == [(0, 1), (1, 2), (2, 7)]  # an assistant message takes in no run after it
