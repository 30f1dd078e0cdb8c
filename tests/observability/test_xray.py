"""Flow nodes as X-Ray subsegments: one per node under a ``compactor flow`` subsegment, with annotations a
trace search can use, placed in time from the nodes' latencies; nothing at all when tracing is off."""

from __future__ import annotations

import logging
from types import ModuleType, SimpleNamespace
from typing import Any

import aws_xray_sdk
import pytest
from aws_xray_sdk.core.context import Context
from aws_xray_sdk.core.recorder import AWSXRayRecorder

from compactor_cli.lambda_runtime import LocalLambdaContext
from compactor.call_record import CallRecord, flow_facts
from compactor_aws.observability import FLOW_SUBSEGMENT, record_call, summarize, trace_flow_nodes
from compactor_aws.routes import common

from .conftest import api_event, corpus_messages

NODES = [
    {"node": "n1", "kind": "data", "inputs": ["n0"], "cost_reported": 0},
    {"node": "n2", "kind": "decision", "inputs": ["n1"], "provider": "acme", "served_model_id": "d1",
     "tokens_in": 100, "tokens_out": 5, "tokens_cached": None, "cost_reported": 0.0001, "latency_ms": 250},
    {"node": "n3", "kind": "llm", "inputs": ["n2"], "provider": "acme", "served_model_id": "s1",
     "tokens_in": 900, "tokens_out": 80, "cost_reported": 0.002, "latency_ms": 600,
     "fallback": "input", "error": "invalid_summary: the summary said SECRET-CONTENT"},
    {"node": "n4", "kind": "llm", "inputs": ["n2"], "skipped": True, "cost_reported": 0, "error": "flow_deadline"},
]
FAILED_NODE = {"node": "n5", "kind": "llm", "inputs": ["n2"], "provider": "acme", "latency_ms": 40,
               "error": "provider_error: 500 echoing SECRET-CONTENT"}
RECORD = CallRecord(status=200, body={}, mode="decision", bytes_in=10, bytes_out=5, target_met=True, cost_usd=0.0021,
                    flow_fingerprint="1-2", **flow_facts(NODES))


class CapturingEmitter:
    def __init__(self) -> None:
        self.entities: list[Any] = []

    def send_entity(self, entity: Any) -> None:
        self.entities.append(entity)

    def set_daemon_address(self, address: str) -> None:  # part of the emitter interface
        pass

    @property
    def ip(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return 2000


@pytest.fixture
def xray() -> Any:
    """A real X-Ray recorder with an open segment, sending to memory instead of the daemon."""
    enabled = aws_xray_sdk.global_sdk_config.sdk_enabled()
    aws_xray_sdk.global_sdk_config.set_sdk_enabled(True)
    recorder = AWSXRayRecorder()
    emitter = CapturingEmitter()
    recorder.configure(emitter=emitter, sampling=False, context=Context(), streaming_threshold=1000,
                       context_missing="LOG_ERROR")
    segment = recorder.begin_segment("CompactFunction")
    yield SimpleNamespace(tracer=SimpleNamespace(disabled=False, provider=recorder), segment=segment,
                          recorder=recorder, emitter=emitter)
    aws_xray_sdk.global_sdk_config.set_sdk_enabled(enabled)


def test_one_subsegment_per_node_with_annotations_and_times(xray: Any) -> None:
    summary = summarize(RECORD)

    written = trace_flow_nodes(xray.tracer, summary, RECORD.nodes, started_at=1000.0, ended_at=1001.0)

    assert written == 4
    (flow,) = xray.segment.subsegments
    assert flow.name == FLOW_SUBSEGMENT and (flow.start_time, flow.end_time) == (1000.0, 1001.0)
    assert flow.annotations == {"route": "compact", "mode": "decision", "model_calls": 2, "fallbacks": 2,
                                "flow_fingerprint": "1-2"}
    by_node = {sub.annotations["node"]: sub for sub in flow.subsegments}
    assert [sub.name for sub in flow.subsegments] == ["n1 data", "n2 decision", "n3 llm", "n4 llm"]
    assert by_node["n2"].annotations == {"node": "n2", "kind": "decision", "provider": "acme", "outcome": "ok"}
    assert by_node["n3"].annotations == {"node": "n3", "kind": "llm", "provider": "acme", "outcome": "fallback",
                                         "error_kind": "invalid_summary"}
    assert by_node["n4"].annotations["outcome"] == "deadline" and by_node["n4"].annotations["provider"] == "none"
    metadata = by_node["n3"].metadata["compactor"]["flow_node"]
    assert metadata["cost_reported"] == 0.002 and metadata["tokens_in"] == 900 and metadata["latency_ms"] == 600
    assert metadata["served_model_id"] == "s1" and metadata["timing"] == "latency"
    # n2 starts with the flow (its input n1 took no time), n3 when n2 ended, each lasting its latency
    assert (by_node["n2"].start_time, by_node["n2"].end_time) == pytest.approx((1000.0, 1000.25))
    assert (by_node["n3"].start_time, by_node["n3"].end_time) == pytest.approx((1000.25, 1000.85))
    assert all(not sub.in_progress for sub in flow.subsegments) and not flow.in_progress
    # error text stays out of the trace
    xray.recorder.end_segment()
    (sent,) = xray.emitter.entities
    assert "SECRET-CONTENT" not in sent.serialize()


def test_failed_and_fallen_back_nodes_are_marked_fault_and_error(xray: Any) -> None:
    """The console's fault and error views (and ``fault = true`` / ``error = true``) find a call whose model
    call failed; the outcome used to be an annotation only, and every subsegment looked healthy."""
    record = CallRecord(status=200, body={}, mode="decision", **flow_facts([*NODES, FAILED_NODE]))

    trace_flow_nodes(xray.tracer, summarize(record), record.nodes, started_at=1000.0, ended_at=1001.0)

    (flow,) = xray.segment.subsegments
    flags = {sub.annotations["node"]: (getattr(sub, "fault", False), getattr(sub, "error", False))
             for sub in flow.subsegments}
    assert flags == {"n1": (False, False), "n2": (False, False), "n3": (False, True), "n4": (False, False),
                     "n5": (True, False)}
    xray.recorder.end_segment()
    (sent,) = xray.emitter.entities
    assert "SECRET-CONTENT" not in sent.serialize()


def test_disabled_tracer_writes_nothing() -> None:
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"provider.{name} used while tracing is disabled")

    summary = summarize(RECORD)

    assert trace_flow_nodes(SimpleNamespace(disabled=True, provider=Exploding()), summary, RECORD.nodes,
                            started_at=0.0, ended_at=1.0) == 0
    assert trace_flow_nodes(None, summary, RECORD.nodes, started_at=0.0, ended_at=1.0) == 0


def test_no_segment_to_attach_to_is_a_no_op(xray: Any) -> None:
    recorder = AWSXRayRecorder()
    recorder.configure(context=Context(), context_missing="IGNORE_ERROR", sampling=False)
    summary = summarize(RECORD)

    assert trace_flow_nodes(SimpleNamespace(disabled=False, provider=recorder), summary, RECORD.nodes,
                            started_at=0.0, ended_at=1.0) == 0


def test_a_failing_tracer_never_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def begin_subsegment(self, name: str) -> Any:
            raise RuntimeError("daemon gone")

    logger = logging.getLogger("observability-test")
    metrics = SimpleNamespace(namespace="Test", service="svc")
    with caplog.at_level(logging.INFO, logger="observability-test"):
        summary = record_call(RECORD, logger=logger, metrics=metrics,
                              tracer=SimpleNamespace(disabled=False, provider=Broken()), started_at=0.0,
                              ended_at=1.0)

    # still returned: the ledger entry is made from it, at the time it carries (docs/billing.md)
    assert summary is not None and summary.time and summary == summarize(RECORD, time=summary.time)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["billing", "observability failed: RuntimeError"]  # billed before the trace failed


class FakeSubsegment:
    def __init__(self, name: str) -> None:
        self.name, self.annotations, self.metadata, self.subsegments = name, {}, {}, []
        self.start_time = self.end_time = None

    def put_annotation(self, key: str, value: Any) -> None:
        self.annotations[key] = value

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        self.metadata.setdefault(namespace, {})[key] = value


class FakeRecorder:
    """Stands in for the X-Ray recorder while the SDK itself stays disabled (as Tracer leaves it in tests)."""

    def __init__(self) -> None:
        self.root = FakeSubsegment("## handler")
        self.stack = [self.root]

    def begin_subsegment(self, name: str) -> FakeSubsegment:
        subsegment = FakeSubsegment(name)
        self.stack[-1].subsegments.append(subsegment)
        self.stack.append(subsegment)
        return subsegment

    def end_subsegment(self, end_time: float | None = None) -> None:
        self.stack.pop().end_time = end_time


def test_handler_traces_the_flow_after_the_call(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = FakeRecorder()
    monkeypatch.setattr(common, "tracer", SimpleNamespace(disabled=False, provider=recorder))
    event = api_event("compact-legacy", {"messages": corpus_messages(), "decision_policy_ir": [
        "policy", ["meets_req"], ["field", "context"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]})

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 200 and recorder.stack == [recorder.root]
    (flow,) = recorder.root.subsegments
    assert flow.name == FLOW_SUBSEGMENT and flow.annotations["mode"] == "decision"
    kinds = {sub.annotations["kind"] for sub in flow.subsegments}
    assert {"data", "decision", "llm"} <= kinds
    assert {sub.annotations["provider"] for sub in flow.subsegments if sub.annotations["kind"] != "data"} == {
        "builtin"}
    assert all(flow.start_time <= sub.start_time <= sub.end_time <= flow.end_time for sub in flow.subsegments)
