"""Which batch payloads travel in the execution's input and which through S3 (``map_items``)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor_aws.stepfunctions_runner import INLINE_PAYLOADS_MAX_BYTES, StepFunctionsFlowRunner, map_items
from compactor.budget import Deadline

RUN = "fanout/0123/"


def size(text: str) -> int:
    """What a payload costs in the execution input: its JSON string."""
    return len(json.dumps(text))


def test_small_payloads_all_travel_inline_and_nothing_is_uploaded() -> None:
    payloads = ['{"flow_ir":["flow",{}]}', '{"flow_ir":["flow",{"a":"\\u00e9"}]}']
    items, uploads = map_items(payloads, RUN)
    assert uploads == {}
    assert items == [{"key": None, "payload": payloads[0], "result_key": "fanout/0123/0.result.json"},
                     {"key": None, "payload": payloads[1], "result_key": "fanout/0123/1.result.json"}]


def test_the_smallest_go_inline_first_up_to_the_budget_exactly() -> None:
    payloads = ["x" * 30, "y" * 10, "z" * 20]
    budget = size(payloads[1]) + size(payloads[2])
    items, uploads = map_items(payloads, RUN, budget)
    assert [item["payload"] is not None for item in items] == [False, True, True]
    assert uploads == {"fanout/0123/0.json": payloads[0]} and items[0]["key"] == "fanout/0123/0.json"
    items, uploads = map_items(payloads, RUN, budget - 1)  # one byte short: only the smallest fits
    assert [item["payload"] is not None for item in items] == [False, True, False]
    assert set(uploads) == {"fanout/0123/0.json", "fanout/0123/2.json"}
    assert map_items(payloads, RUN, 0)[1] == {f"fanout/0123/{i}.json": text for i, text in enumerate(payloads)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=60), max_size=12), st.integers(min_value=0, max_value=400))
def test_the_inline_set_is_the_greedy_smallest_first_within_the_budget(payloads: list[str], budget: int) -> None:
    items, uploads = map_items(payloads, RUN, budget)
    assert len(items) == len(payloads)
    order = sorted(range(len(payloads)), key=lambda i: size(payloads[i]))  # stable: ties by position
    expected, used = set(), 0
    for index in order:
        if used + size(payloads[index]) > budget:
            break
        expected.add(index)
        used += size(payloads[index])
    for index, item in enumerate(items):
        assert item["result_key"] == f"{RUN}{index}.result.json"
        if index in expected:
            assert item == {"key": None, "payload": payloads[index], "result_key": item["result_key"]}
        else:
            assert item["payload"] is None and uploads[item["key"]] == payloads[index]
    assert len(uploads) == len(payloads) - len(expected)
    assert sum(size(item["payload"]) for item in items if item["payload"] is not None) <= budget


class RecordingStepFunctions:
    def __init__(self) -> None:
        self.inputs: list[str] = []

    def start_sync_execution(self, *, stateMachineArn: str, name: str, input: str) -> dict[str, Any]:
        self.inputs.append(input)
        return {"status": "SUCCEEDED", "output": json.dumps([{"status": "failed"}] * len(json.loads(input)["items"]))}


def test_a_full_inline_budget_keeps_the_execution_input_under_step_functions_quota() -> None:
    # 64 components (more than a request's batches) whose payloads, escapes included, fill the budget.
    text = json.dumps({"flow_ir": ["flow", {"n1": {"kind": "data", "value": 'quote " and \\ and \u00e9' * 8}}]})
    count = 64
    payloads = [text + " " * ((INLINE_PAYLOADS_MAX_BYTES // count) - size(text) - 2) for _ in range(count)]
    items, uploads = map_items(payloads, RUN)
    assert uploads == {} and sum(size(t) for t in payloads) <= INLINE_PAYLOADS_MAX_BYTES
    sfn = RecordingStepFunctions()
    runner = StepFunctionsFlowRunner("arn:aws:states:us-east-1:123456789012:stateMachine:x", "bucket",
                                     stepfunctions=sfn, s3=object())
    runner._upload_and_execute(uploads, items, RUN, Deadline.after_ms(30_000))
    (sent,) = sfn.inputs
    assert len(sent.encode("utf-8")) <= 256 * 1024  # Step Functions' quota for an execution's input
    assert [item["payload"] for item in json.loads(sent)["items"]] == payloads  # the texts, unchanged


def test_nothing_is_uploaded_when_every_payload_is_inline() -> None:
    class NoS3:
        def put_object(self, **_: Any) -> None:
            raise AssertionError("no upload expected")

    sfn = RecordingStepFunctions()
    runner = StepFunctionsFlowRunner("arn:aws:states:us-east-1:123456789012:stateMachine:x", "bucket",
                                     stepfunctions=sfn, s3=NoS3())
    items, uploads = map_items(['{"a":1}'], RUN)
    assert runner._upload_and_execute(uploads, items, RUN, Deadline.after_ms(30_000)) == [{"status": "failed"}]
    assert json.loads(sfn.inputs[0])["items"] == items
