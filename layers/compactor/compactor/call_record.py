"""The typed record of one call (see docs/architecture.md, "The call record").

The core returns a :class:`CallRecord` for every call of every route: the HTTP status and response
body *and* the facts the adapters need (mode, bytes, model calls, fallbacks with their reasons, cost
and whether it is known, per-node outcomes). Billing records, metrics, traces, the CLI report and the
fan-out read these fields; nothing outside the response edge reads ``x_router`` or ``compaction``
back out of a body.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import field, replace
from typing import Any

from compactor.records import record

FLOW_MODE = "flow"
"""``mode`` of a ``/v1/flows`` call (compactions carry their compaction mode's name)."""
NO_MODE = "none"
"""``mode`` of a call that runs nothing (``/v1/flows/normalize``)."""

# Compiled on first use by ``re``'s cache, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_KIND_PREFIX = r"[A-Za-z0-9_.-]{1,64}"


@record(frozen=True)
class NodeOutcome:
    """One flow node as it ended: ``outcome`` is ``ok``, ``skipped``, ``deadline`` (skipped after the
    shared deadline), ``fallback`` or ``error``; ``error_kind`` is the leading token of the error only."""

    node: str
    kind: str
    outcome: str
    provider: str | None = None
    error_kind: str | None = None
    inputs: tuple[str, ...] = ()
    latency_ms: float | None = None
    fell_back: bool = False  # it fell back to its fallback value or carries an error (skipped ones too)
    trace: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the node's trace entry

    @classmethod
    def from_trace(cls, entry: dict[str, Any]) -> NodeOutcome:
        """From one entry of a flow's trace (``FlowResult.flow_nodes``)."""
        get = entry.get
        error = get("error")
        has_error = "error" in entry
        fallback = get("fallback")
        if get("skipped"):
            outcome = "deadline" if error == "flow_deadline" else "skipped"
        elif fallback:
            outcome = "fallback"
        elif has_error:
            outcome = "error"
        else:
            outcome = "ok"
        if error is None:
            error_kind = None
        else:
            kind_match = re.match(_KIND_PREFIX, error) if isinstance(error, str) else None
            error_kind = kind_match.group(0) if kind_match else "unknown"
        latency = get("latency_ms")
        inputs = get("inputs")
        # A new instance's fields set at once (the frozen __init__ sets each through object.__setattr__,
        # about 1 µs more a node: docs/performance.md); the same instance as the constructor makes.
        made = object.__new__(cls)
        made.__dict__.update(
            node=str(get("node")), kind=str(get("kind")), outcome=outcome, provider=get("provider"),
            error_kind=error_kind, inputs=tuple(map(str, inputs)) if isinstance(inputs, list) else (),
            latency_ms=float(latency) if isinstance(latency, (int, float)) and not isinstance(latency, bool)
            else None, fell_back=bool(fallback) or has_error, trace=entry)
        return made

    @property
    def model_call(self) -> bool:
        return self.kind in MODEL_NODE_KINDS and self.outcome not in ("skipped", "deadline")

    @property
    def calls_made(self) -> int:
        """Provider calls this node made (its routing decision included): the ``attempted`` events of its
        traces, retries and failovers included, and a call cut off by a timeout keeps its trace (the attempt cut
        off is one of them: ``compactor.router.routed_traces``); a model node without a trace made one, unless it
        failed before sending anything. Billing counts these."""
        if not self.model_call:
            return 0
        routing = self.trace.get("routing")
        made = attempts(routing.get("decision_trace") if isinstance(routing, dict) else None)
        if isinstance(self.trace.get("decision_trace"), dict):
            return made + attempts(self.trace["decision_trace"])
        nothing_sent = self.trace.get("cost_reported") == 0 and "error" in self.trace
        return made + (0 if nothing_sent else 1)

    @property
    def default_cache_prices(self) -> tuple[str, ...]:
        """The cache prices this node's calls (its routing decision's included) were priced at by default, the offer
        stating none (:func:`default_cache_prices`)."""
        routing = self.trace.get("routing")
        return tuple(sorted({*default_cache_prices(routing.get("decision_trace") if isinstance(routing, dict)
                                                   else None),
                             *default_cache_prices(self.trace.get("decision_trace"))}))


def attempts(decision_trace: Any) -> int:
    """Provider calls one routed call made: the ``attempted`` events of its ``decision_path``, but for those that
    failed before their request left (``sent: false``: no key, no connection; no provider saw them)."""
    path = decision_trace.get("decision_path") if isinstance(decision_trace, dict) else None
    return sum(1 for step in path if isinstance(step, dict) and step.get("event") == "attempted"
               and step.get("sent", True)) if isinstance(path, list) else 0


def failovers(decision_trace: Any) -> tuple[str, ...]:
    """The error kind of every failed attempt of one routed call (what made it fall over)."""
    path = decision_trace.get("decision_path") if isinstance(decision_trace, dict) else None
    return tuple(str(step["error_kind"]) for step in path if isinstance(step, dict) and step.get("error_kind")) \
        if isinstance(path, list) else ()


def default_cache_prices(decision_trace: Any) -> tuple[str, ...]:
    """The cache prices one routed call was priced at by default (``price_cached_in``, ``price_cache_write``): the
    answer's (the trace's ``default_cache_prices``) and those of the rejected answers priced from their usage whose
    cost the call's includes (its ``attempted`` events'), as ``compactor.router`` names them (docs/billing.md "Prices
    the catalog does not state")."""
    if not isinstance(decision_trace, dict):
        return ()
    path = decision_trace.get("decision_path")
    named = [decision_trace.get("default_cache_prices")] + (
        [step.get("default_cache_prices") for step in path if isinstance(step, dict)] if isinstance(path, list) else [])
    return tuple(sorted({str(name) for names in named if isinstance(names, list) for name in names}))


MODEL_NODE_KINDS = frozenset({"llm", "decision"})
"""Flow node kinds that call a model (``data`` nodes never do). The same set as the engine's
``compactor.flow.graph.MODEL_KINDS`` (a test holds them equal); not imported from there, because
importing the engine would load all of it into every handler's cold start."""


@record(frozen=True)
class CallRecord:
    """One call: what was answered and what it took.

    ``mode`` is a registered compaction mode name, ``flow`` (``/v1/flows``) or ``none``. ``bytes_in`` /
    ``bytes_out`` are the dense JSON sizes of the messages in and out (compaction) or the request and
    response bodies (flows). ``cost_usd`` is ``None`` when a model call's cost is unknown. ``nodes`` are
    the flow's nodes, or one ``llm`` node per model call of a seal; ``report`` is the mode's own report
    (the body's ``compaction`` block, for the modes that have one).
    """

    status: int
    body: dict[str, Any]
    mode: str
    route: str = "compact"
    bytes_in: int | None = None
    bytes_out: int | None = None
    target_met: bool | None = None
    model_calls: int = 0
    fallbacks: tuple[str, ...] = ()  # one reason per fallback taken (error kinds of failed attempts/nodes)
    cost_usd: float | None = 0.0
    cost_basis: str | None = None  # how cost_usd was arrived at (docs/behaviour.md#cost-rules); None: no model call
    tokens_in: int | None = None
    tokens_out: int | None = None
    nodes: tuple[NodeOutcome, ...] = ()
    flow_fingerprint: str | None = None
    report: dict[str, Any] | None = field(default=None, compare=False)  # the mode's compaction report
    windows_default_cache_prices: tuple[str, ...] = ()  # a windowed run's (its windows' nodes are not in ``nodes``)
    headers: dict[str, str] = field(default_factory=dict)  # the answer's own headers (a router error's Retry-After)

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def cost_known(self) -> bool:
        return self.cost_usd is not None

    @property
    def default_cache_prices(self) -> tuple[str, ...]:
        """The cache prices some of this call's model calls were priced at by default, the offer stating none
        (``price_cached_in``, ``price_cache_write``; docs/billing.md "Prices the catalog does not state"): what its
        billing line says, so that an invoice can be checked. Empty when every price was stated or reported."""
        return tuple(sorted({*self.windows_default_cache_prices,
                             *(name for node in self.nodes for name in node.default_cache_prices)}))

    @property
    def bytes_saved(self) -> int | None:
        if self.bytes_in is None or self.bytes_out is None:
            return None
        return self.bytes_in - self.bytes_out

    def with_route(self, route: str) -> CallRecord:
        return replace(self, route=route)

    def answer(self) -> tuple[int, dict[str, Any]]:
        return self.status, self.body

    def in_format(self, items_field: str) -> CallRecord:
        """The record with the body's items under the format's own name (``input`` for Responses)."""
        if items_field == "messages" or "messages" not in self.body:
            return self
        body = {(items_field if key == "messages" else key): value for key, value in self.body.items()}
        return replace(self, body=body)


def flow_facts(flow_nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """``nodes``, ``model_calls`` and ``fallbacks`` of a flow from its trace entries: model calls are the
    provider calls the ``llm``/``decision`` nodes made (:attr:`NodeOutcome.calls_made`), fallbacks the
    nodes that fell back or failed."""
    nodes = tuple(NodeOutcome.from_trace(entry) for entry in flow_nodes)
    return {"nodes": nodes, "model_calls": sum(node.calls_made for node in nodes),
            "fallbacks": tuple(node.error_kind or node.outcome for node in nodes if node.fell_back)}


def refused(error: Any, *, mode: str, route: str = "compact") -> CallRecord:
    """The record of a call the core refused (a ``compactor.errors.CompactorError``): no model call."""
    status, body = error.answer()
    return CallRecord(status=status, body=body, mode=mode, route=route, headers=error.headers())


@record
class CallTally:
    """What the routed calls run inside :func:`counting_calls` are known to have done, counted by the router as each
    ends: the provider calls they made (:func:`attempts` of their traces, as a record counts them), the tokens their
    answers reported and what they cost, known while every call that ended was priced (as its record prices it) and
    none is still running or ran elsewhere (a fan-out worker's). Read when a call ends in an exception no handler
    expects, whose record was never built (:func:`crashed`)."""

    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    priced: bool = True  # every routed call that ended had a known cost
    running: int = 0  # routed calls begun and not ended
    elsewhere: bool = False  # provider calls were made outside this process (a fan-out's workers)

    def begin(self) -> None:
        """One routed call starts."""
        self.running += 1

    def add(self, decision_trace: Any, response: Any, cost_usd: float | None = None) -> None:
        """One routed call that ended (begun with :meth:`begin`): its trace, its answer (None when it failed) and its
        cost with its failed attempts' (None when unknown: a call cut off by a timeout, an unpriced answer; a call
        that sent nothing cost nothing)."""
        self.running -= 1
        made = attempts(decision_trace)
        self.model_calls += made
        if response is not None:
            self.tokens_in += response.tokens_in or 0
            self.tokens_out += response.tokens_out or 0
        if cost_usd is not None:
            self.cost_usd += cost_usd
        elif made:
            self.priced = False

    @property
    def cost(self) -> float | None:
        """What the routed calls cost, when it is known (:class:`CallTally`), else None."""
        return self.cost_usd if self.priced and not self.running and not self.elsewhere else None


_tally: ContextVar[CallTally | None] = ContextVar("compactor_call_tally", default=None)


@contextmanager
def counting_calls() -> Iterator[CallTally]:
    """Count the routed calls of everything run inside (one call of a front door; its tasks share the tally)."""
    token = _tally.set(CallTally())
    try:
        yield _tally.get()  # type: ignore[misc]
    finally:
        _tally.reset(token)


def tally() -> CallTally | None:
    """The tally of the call running (:func:`counting_calls`), None outside one."""
    return _tally.get()


def crashed(error: BaseException, counted: CallTally, *, mode: str, route: str = "compact") -> CallRecord:
    """The record of a call that raised ``error`` instead of returning its record: the status its front door answers
    (a ``compactor.errors.CompactorError``'s own, else the 500 ``internal server error`` of an exception no handler
    expects), nothing delivered (no ``bytes_out``, no ``target_met``), the provider calls and tokens ``counted``, and
    their cost when every one is known (:attr:`CallTally.cost`: no call that ended unpriced, none still running or run
    by a fan-out's workers), else unknown (docs/billing.md, "A failed call's fields"). Its cost was always unknown."""
    from compactor.errors import CompactorError, InternalError

    status, body = (error if isinstance(error, CompactorError) else InternalError()).answer()
    cost = counted.cost
    return CallRecord(status=status, body=body, mode=mode, route=route, model_calls=counted.model_calls,
                      cost_usd=cost, cost_basis="reported" if cost is not None and counted.model_calls else None,
                      tokens_in=counted.tokens_in or None, tokens_out=counted.tokens_out or None)
