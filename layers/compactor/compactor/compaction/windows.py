"""Windowed decision compaction: transcripts beyond one request's limits (docs/scale.md).

One ``/v1/compact`` request considers at most ``MAX_CANDIDATES`` units in ``MAX_BATCHES`` batches and
``MAX_FLOW_INPUT_BYTES`` of flow input. Here a transcript's units are cut, in order, into *windows*
that each fit those limits; a unit never leaves its window, and protected units (pins, the recent
tail) ride along unchanged. Each window is one JSON task (:func:`windows`) compacted by
:func:`compact_window` with the same preset flow, wherever it runs (inline, or one Distributed Map
worker per window); results are concatenated in window order (:class:`PassAssembly`). While the
output misses the target and a pass still shrinks it, another pass runs on the output (at most
``MAX_PASSES``).

Everything reads messages from iterators, so a transcript never has to be in memory whole:
:func:`scan` (one read; two for a format whose units are known only once the whole stream is read,
``anthropic-messages``) gives a pass its context, :func:`windows` (another read) yields the tasks. The format is the
run's (``Settings.format``, one of ``formats.WINDOWED_FORMATS``): its units, pins, protected tail, model view and
summaries are the dialect's, as for one request.
"""

from __future__ import annotations

import asyncio
from array import array
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import field
from typing import Any

from compactor.call_record import flow_facts
from compactor.budget import Deadline
from compactor.chat import Message, has_tool_calls, is_tool_result, role_of
from compactor.errors import InvalidRequest
from compactor.flow import admit_flow, run_flow
from compactor.jsonutil import dense_size
from compactor.compaction.modes import PINS_MESSAGE, refuse_negative_max_tokens
from compactor.compaction.preparation import (
    BUDGET_FLOOR,
    MAX_BATCHES,
    MAX_CANDIDATES,
    MAX_FLOW_INPUT_BYTES,
    MAX_SUMMARY_RECORD_BYTES,
    TAIL_TARGET_SHARE,
    Batch,
    BatchSizer,
    Candidate,
    PinText,
    Questions,
    bounded_tail,
    candidate,
    fit_batches,
    pin_text,
    pin_view_bytes,
    pins_view,
    recent_view,
    summary_budget,
    tail_length,
    view_names,
    with_used_lines,
)
from compactor.records import record
from compactor.compaction.decision import admit_request_policies, summary_reply_limit
from compactor.compaction.preset import default_decision_policy, materialise, question_template, requested_max_tokens
from compactor.compaction.reassembly import first_changed_index, unit_outcome, with_fallbacks
from compactor.compaction.units import ALWAYS_PINNED_ROLES, Unit, is_default_pin
from compactor.formats import DEFAULT_FORMAT, get_dialect
from compactor.formats.base import Dialect

MAX_PASSES = 4
MIN_PASS_GAIN = 0.01
"""A pass that removes less than this share of its input's bytes ends the run."""
INSTRUCTIONS_MAX_BYTES = 8_000
"""Pinned messages shown to every window's decisions, in transcript order, as one request shows its pins
(``preparation.pins_view``: role and content text, excerpted), while their largest entries take up to this many
bytes."""
WINDOW_MAX_BYTES = 4_000_000
"""A window also closes at this many bytes of messages (protected ones included)."""
DEFAULT_CONCURRENCY = 4


@record(frozen=True)
class Settings:
    """The request fields every window and pass of one run shares."""

    keep_recent: int = 6
    target_ratio: float = 0.1
    pinned_indices: tuple[int, ...] | None = None
    decision_policy_ir: Any = None
    policy_ir: Any = None
    max_tokens: int | None = None  # None: each summary call sized to its batch (preset.requested_max_tokens)
    bounded_tail: bool = True  # the default tail, bounded by bytes (compaction.preparation.bounded_tail)
    format: str = DEFAULT_FORMAT  # one of formats.WINDOWED_FORMATS (a run state saved before has none: chat)

    @classmethod
    def from_request(cls, request: Any) -> "Settings":
        pins = request.pinned_indices
        return cls(keep_recent=request.keep_recent, target_ratio=request.target_ratio,
                   pinned_indices=None if pins is None else tuple(sorted(set(pins))),
                   decision_policy_ir=(default_decision_policy() if request.decision_policy_ir is None
                                       else request.decision_policy_ir),
                   policy_ir=request.policy_ir, max_tokens=requested_max_tokens(request),
                   bounded_tail=bounded_tail(request), format=request.format)

    def flow_settings(self) -> dict[str, Any]:
        return {"decision_policy_ir": self.decision_policy_ir, "policy_ir": self.policy_ir,
                "max_tokens": self.max_tokens}


@record
class PassContext:
    """What :func:`scan` learns from one read of a pass's input."""

    count: int
    pins: set[int]
    tail_start: int
    instructions: list[Message]  # what the decisions see of the pins (preparation.pins_view)
    recent_evidence: list[str]
    input_bytes: int
    target_bytes: int
    budget: int
    message_bytes: array  # dense size of each message, in order
    unit_ends: array | None = None  # where each unit ends, for a format whose units the scan found from the whole
    # stream (Dialect.stream_facts); None: units are found as the messages come (group_units)
    last_use: dict[str, int] = field(default_factory=dict)  # of each name of a unit sent as its bounded view, the last
    # message using it (_LaterUses)

    def protected(self, unit: Unit) -> bool:
        return unit.end > self.tail_start or any(i in self.pins for i in unit.indexes())


def group_units(messages: Iterable[Message]) -> Iterator[tuple[Unit, list[Message]]]:
    """Units (as :func:`compactor.compaction.units.split_units` cuts them) with their messages, lazily."""
    start, current, in_call = 0, [], False
    for index, message in enumerate(messages):
        if current and in_call and is_tool_result(message):
            current.append(message)
            continue
        if current:
            yield Unit(start, index), current
        start, current, in_call = index, [message], has_tool_calls(message)
    if current:
        yield Unit(start, start + len(current)), current


# Fewer dense bytes than any unit sent as its bounded view has: its entry, the dense JSON of its view escaped once more
# as a string, must exceed a summary record; that escape at most doubles a JSON text (a quote or backslash), and a
# view is not much larger than its messages, so 8 leaves a wide margin (a unit it misses keeps head and tail only).
_BOUNDED_UNIT_MIN_BYTES = MAX_SUMMARY_RECORD_BYTES // 8


class _LaterUses:
    """The last message using each name of a unit sent as its bounded view (its ``candidate`` says so), found while a
    pass's units are read in order, for :func:`windows`' ``used_names``. Only those units' names are watched and
    only messages after the first such unit are read for names (``preparation.view_names``), so a pass without one
    reads no names and keeps none: what is held grows with those units, not with the transcript."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.watched: set[str] = set()
        self.last_use: dict[str, int] = {}
        self._template: Questions | None = None

    def add(self, unit: Unit, unit_messages: list[Message], unit_bytes: int) -> None:
        """Read the next unit: its uses of names watched already, then its own names if it is sent as a bounded
        view (a unit a pass protects never is, and watching its names costs only their reading)."""
        if self.watched:
            for index, message in zip(unit.indexes(), unit_messages):
                for name in view_names(message, self.dialect).intersection(self.watched):
                    self.last_use[name] = index
        if unit_bytes < _BOUNDED_UNIT_MIN_BYTES:
            return
        if self._template is None:
            self._template = Questions.of(question_template())
        if candidate(unit, unit_messages, self._template, self.dialect).omitted:
            for message in unit_messages:
                self.watched |= view_names(message, self.dialect)


def scan(messages: Iterable[Message], settings: Settings, *, target_bytes: int | None = None,
         reread: Callable[[], Iterable[Message]] | None = None) -> PassContext:
    """One read of a pass's input: pins, tail, instructions, recent evidence, sizes, budget and, for the units sent as
    their bounded views, the last message using each of their names (:class:`_LaterUses`, for :func:`windows`).
    ``target_bytes`` is the run's target (default: this input's bytes times the target ratio). A format whose
    units are known only once the whole stream is read (``Dialect.stream_facts``: ``anthropic-messages``) is read
    twice, the second time from ``reread()`` (:func:`_scan_paired`)."""
    dialect = get_dialect(settings.format)
    facts = dialect.stream_facts()
    if facts is not None:
        if reread is None:
            raise ValueError(f"a scan of {settings.format} reads its input twice: reread is needed")
        return _scan_paired(messages, reread, settings, dialect, facts, target_bytes)
    explicit = None if settings.pinned_indices is None else set(settings.pinned_indices)
    keep = max(1, settings.keep_recent)
    sizes: array = array("q")
    pins: set[int] = set()
    instructions = _PinTexts()
    unit_end, unit_pinned = array("q"), bytearray()
    recent: deque[tuple[Unit, list[Message]]] = deque()
    count = 0
    previous: Message | None = None
    later = _LaterUses(dialect)
    for unit, unit_messages in group_units(_counted(messages, sizes)):
        later.add(unit, unit_messages, sum(sizes[unit.start:unit.end]))
        pinned = False
        for index, message in zip(unit.indexes(), unit_messages):
            # As instruction_pins: explicit pins (else the default ones, docs/differences.md), and always
            # every system/developer message.
            if explicit is None:
                pin = is_default_pin(message, previous)
            else:
                pin = index in explicit or role_of(message) in ALWAYS_PINNED_ROLES
            previous = message
            if pin:
                pins.add(index)
                pinned = True
                instructions.add(message)
        unit_end.append(unit.end)
        unit_pinned.append(pinned)
        count = unit.end
        recent.append((unit, unit_messages))
        while len(recent) > 1 and recent[1][0].start <= count - keep:
            recent.popleft()
    _check_pins(explicit, count)
    input_bytes, target, tail_start = _input_target_tail(sizes, settings, target_bytes)
    recent_evidence = [recent_view(msgs) for unit, msgs in recent if unit.end > tail_start]
    return PassContext(count=count, pins=pins, tail_start=tail_start, instructions=instructions.view(),
                       recent_evidence=recent_evidence, input_bytes=input_bytes, target_bytes=target,
                       budget=_budget(target, tail_start, sizes, unit_end, unit_pinned), message_bytes=sizes,
                       last_use=later.last_use)


def _scan_paired(messages: Iterable[Message], reread: Callable[[], Iterable[Message]], settings: Settings,
                 dialect: Dialect, facts: Any, target_bytes: int | None) -> PassContext:
    """:func:`scan` of a format whose calls and results are paired by id (docs/scale.md): a ``tool_use``'s unit runs to
    its last ``tool_result``, so the first read records each message's facts (size, call ids opened and answered,
    roles, thinking-only, same turn: ``Dialect.stream_facts``) and the units, pins and the tail (with the turn in
    progress the format protects) are found from them once it ends; the second read takes the pins' text and the
    tail's recent evidence, and reads the units for the names of those sent as bounded views (:class:`_LaterUses`).
    What one request of this format finds for the whole transcript (``prepare``)."""
    explicit = None if settings.pinned_indices is None else set(settings.pinned_indices)
    sizes: array = array("q")
    for message in _counted(messages, sizes):
        facts.add(message)
    count = len(sizes)
    _check_pins(explicit, count)
    units = facts.units()
    pins = facts.pins(explicit, units)
    input_bytes, target, tail_start = _input_target_tail(sizes, settings, target_bytes, facts.tail_start(units))
    unit_ends = array("q", (unit.end for unit in units))
    budget = _budget(target, tail_start, sizes, unit_ends, (not pins.isdisjoint(unit.indexes()) for unit in units))
    del units
    # The second read: the pins' text (while their entries fit: _PinTexts), the tail units' recent evidence and each
    # unit for the later uses of the bounded views' names.
    instructions = _PinTexts()
    later = _LaterUses(dialect)
    unit_ends_iter, unit_start, unit_messages = iter(unit_ends), 0, []
    unit_end = next(unit_ends_iter, None)
    recent_evidence: list[str] = []
    first_tail = next((k for k, end in enumerate(unit_ends) if end > tail_start), len(unit_ends))
    tail_from = unit_ends[first_tail - 1] if first_tail else 0
    ends = iter(unit_ends[first_tail:])
    end, held = next(ends, None), []
    for index, message in enumerate(reread()):
        if index in pins:
            instructions.add(message)
        unit_messages.append(message)
        if index + 1 == unit_end:
            later.add(Unit(unit_start, unit_end), unit_messages, sum(sizes[unit_start:unit_end]))
            unit_start, unit_messages, unit_end = unit_end, [], next(unit_ends_iter, None)
        if index >= tail_from:
            held.append(message)
            if index + 1 == end:
                recent_evidence.append(recent_view(held, dialect))
                end, held = next(ends, None), []
    return PassContext(count=count, pins=pins, tail_start=tail_start, instructions=instructions.view(),
                       recent_evidence=recent_evidence, input_bytes=input_bytes, target_bytes=target,
                       budget=budget, message_bytes=sizes, unit_ends=unit_ends, last_use=later.last_use)


# What both scans find once their first read ends: one home for each (docs/scale.md).


def _check_pins(explicit: set[int] | None, count: int) -> None:
    """As one request's check_pins (compactor.compaction.modes), once the stream is counted."""
    if explicit and (min(explicit) < 0 or max(explicit) >= count):
        raise InvalidRequest(PINS_MESSAGE)


def _input_target_tail(sizes: array, settings: Settings, target_bytes: int | None,
                       format_tail: int | None = None) -> tuple[int, int, int]:
    """The input's dense bytes (its messages' ``sizes``), the run's target (``target_bytes``, default: those bytes
    times the target ratio) and where the protected tail starts: the last ``keep_recent`` messages (the default
    tail bounded by bytes: ``preparation.bounded_tail``), from ``format_tail`` when the format protects more
    (``Dialect.protected_tail_start``)."""
    count = len(sizes)
    input_bytes = 2 + sum(sizes) + max(0, count - 1)
    target = int(input_bytes * settings.target_ratio) if target_bytes is None else target_bytes
    last = sizes[max(0, count - max(1, settings.keep_recent)):]
    tail_start = count - (tail_length(last, int(target * TAIL_TARGET_SHARE)) if settings.bounded_tail else len(last))
    if format_tail is not None and format_tail < tail_start:
        tail_start = format_tail
    return input_bytes, target, tail_start


def _budget(target: int, tail_start: int, sizes: array, ends: Iterable[int], pinned: Iterable[bool]) -> int:
    """The pass's summary budget (``preparation.summary_budget``): the units (each ``end``, and whether it holds a
    pin, in order) that are protected (pinned, or ending in the tail) are kept, the others are candidates."""
    protected_bytes, protected_count, candidates, start = 0, 0, 0, 0
    for end, pin in zip(ends, pinned):
        if pin or end > tail_start:
            protected_bytes += sum(sizes[start:end])
            protected_count += end - start
        else:
            candidates += 1
        start = end
    return summary_budget(target, 2 + protected_bytes + max(0, protected_count - 1), candidates)


class _PinTexts:
    """What the decisions see of the pins (``preparation.pins_view``), added in transcript order while their largest
    entries fit ``INSTRUCTIONS_MAX_BYTES``: what its entry can show, not the message's size (a long task, a pasted
    spec over 8,000 bytes, which one request shows the first 3,000 characters of, was left out of every window's
    instructions)."""

    def __init__(self) -> None:
        self.texts: list[PinText] = []
        self.bytes = 0

    def add(self, message: Message) -> None:
        shown = pin_text(message)
        shown_bytes = pin_view_bytes(shown)
        if self.bytes + shown_bytes <= INSTRUCTIONS_MAX_BYTES:
            self.texts.append(shown)
            self.bytes += shown_bytes

    def view(self) -> list[Message]:
        # As one request shows them: the role and content text of each (before, the pinned messages went whole, and
        # a harness's own fields and hidden reasoning on them reached the decision model; docs/differences.md).
        return pins_view(self.texts)


def _units_ending(messages: Iterable[Message], ends: array) -> Iterator[tuple[Unit, list[Message]]]:
    """The units that end at ``ends`` (a scan's ``unit_ends``) with their messages, lazily."""
    start, current, following = 0, [], iter(ends)
    end = next(following, None)
    for index, message in enumerate(messages):
        current.append(message)
        if index + 1 == end:
            yield Unit(start, end), current
            start, current, end = end, [], next(following, None)
    if current:  # read again, the input held more messages than its scan: what is left, as one unit
        yield Unit(start, start + len(current)), current


def _counted(messages: Iterable[Message], sizes: array) -> Iterator[Message]:
    for message in messages:
        sizes.append(dense_size(message))
        yield message


# --------------------------------------------------------------------------------------- planning


@record
class _Fit:
    """The batches a window's candidates make so far, as :func:`fit_batches` would build them."""

    sizer: BatchSizer
    closed: int = 0
    closed_bytes: int = 0  # flow input entries of the closed batches
    open: Batch = field(default_factory=Batch)
    candidates: int = 0

    def with_candidate(self, cand: Candidate) -> "_Fit":
        """The state after ``cand``, exactly as :func:`fit_batches` goes (a candidate that fits no batch
        even alone is left out: it stays a kept unit)."""
        closed, closed_bytes, open_batch = self.closed, self.closed_bytes, self.open
        if len(open_batch.candidates) >= self.sizer.per_batch or not self.sizer.admissible(open_batch, cand):
            if open_batch.candidates:
                closed_bytes += self.sizer.flow_input_entry(f"batch_{closed}", open_batch)
                closed += 1
            open_batch = Batch()
            if not self.sizer.admissible(open_batch, cand):
                return _Fit(self.sizer, closed, closed_bytes, open_batch, self.candidates)
        grown = Batch(list(open_batch.candidates), decision_bytes=open_batch.decision_bytes,
                      record_bytes=open_batch.record_bytes, bound_bytes=open_batch.bound_bytes,
                      state_bytes=open_batch.state_bytes)
        grown.add(cand)
        return _Fit(self.sizer, closed, closed_bytes, grown, self.candidates + 1)

    def within_limits(self) -> bool:
        batches = self.closed + (1 if self.open.candidates else 0)
        flow_input = 2 + self.closed_bytes + max(0, batches - 1)
        if self.open.candidates:
            flow_input += self.sizer.flow_input_entry(f"batch_{self.closed}", self.open)
        return self.candidates <= MAX_CANDIDATES and batches <= MAX_BATCHES and flow_input <= MAX_FLOW_INPUT_BYTES


def windows(messages: Iterable[Message], context: PassContext, settings: Settings) -> Iterator[dict[str, Any]]:
    """The window tasks of one pass over ``messages`` (the same input :func:`scan` read), lazily.

    A task is JSON: ``index``, ``offset`` (index of its first message in the pass input), ``messages``,
    ``protected`` (start indexes of its protected units), the pass's ``instructions``,
    ``recent_evidence`` and ``budget``, and the run's flow ``settings``; ``used_names`` when one of its units is
    sent as its bounded view and a later message, of this window or another, uses some of its names again: those
    names, by unit id, so that :func:`compact_window` puts back the lines of the view's middle naming them, as one
    request does (docs/offline-offers.md "Units too big for one record"). A window's task holds its own messages
    only; the scan's ``last_use`` knows the later windows'."""
    template = Questions.of(question_template())
    sizer = BatchSizer(context.instructions, context.recent_evidence)
    dialect = get_dialect(settings.format)
    paired = context.unit_ends is not None
    index = 0
    offset, held, protected, held_bytes, starts = 0, [], [], 0, []
    used_names: dict[str, list[str]] = {}
    fit = _Fit(sizer)

    def task() -> dict[str, Any]:
        window = {"index": index, "offset": offset, "messages": held, "protected": protected,
                  "instructions": context.instructions, "recent_evidence": context.recent_evidence,
                  "budget": context.budget, "settings": settings.flow_settings()}
        if settings.format != DEFAULT_FORMAT:  # a chat task stays as it was
            window["format"] = settings.format
        if paired:  # the units the scan found from the whole stream, by their start (the window's alone may differ)
            window["units"] = starts
        if used_names:
            window["used_names"] = used_names
        return window

    grouped = group_units(messages) if context.unit_ends is None else _units_ending(messages, context.unit_ends)
    for unit, unit_messages in grouped:
        size = sum(context.message_bytes[unit.start:unit.end])
        is_protected = context.protected(unit)
        cand = None if is_protected else candidate(unit, unit_messages, template, dialect)
        grown = None if cand is None else fit.with_candidate(cand)
        if held and (held_bytes + size > WINDOW_MAX_BYTES or (grown is not None and not grown.within_limits())):
            yield task()
            index += 1
            offset, held, protected, held_bytes, starts, used_names = unit.start, [], [], 0, [], {}
            fit = _Fit(sizer)
            grown = None if cand is None else fit.with_candidate(cand)
        if grown is not None:
            fit = grown
        if is_protected:
            protected.append(unit.start)
        elif cand.omitted:  # sent as its bounded view: the names of it a later message uses (preparation.used_later)
            used = {name for message in unit_messages for name in view_names(message, dialect)
                    if context.last_use.get(name, -1) >= unit.end}
            if used:
                used_names[unit.id] = sorted(used)
        starts.append(unit.start)
        held.extend(unit_messages)
        held_bytes += size
    if held:
        yield task()


# ------------------------------------------------------------------------------------ one window


def task_units(task: dict[str, Any]) -> list[Unit]:
    """The units of a window task, by their index in the pass input: those its ``units`` (their starts) name, the
    units the pass's scan found from the whole stream; else (``openai-chat``) those of its messages."""
    from compactor.compaction.units import split_units

    messages, offset = task["messages"], task["offset"]
    if "units" in task:
        starts = task["units"]
        return [Unit(start, end) for start, end in zip(starts, [*starts[1:], offset + len(messages)], strict=True)]
    return [Unit(u.start + offset, u.end + offset) for u in split_units(messages)]


async def compact_window(task: dict[str, Any], *, router: Any, deadline: Deadline,
                         flow_runner: Callable[..., Awaitable[Any]] | None = None,
                         on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Compact one window task with the preset flow. The result: ``index``, ``messages`` (what the
    window becomes), ``actions`` (count per action), ``reasons`` and the flow's token and cost totals.
    A failed flow keeps every unit; a window that would not shrink keeps its original. The task's ``format`` (none:
    ``openai-chat``) is its messages'; its ``units`` (their starts), when it has them, are the units the pass's scan
    found; the window's messages, in that format, are checked (``Dialect.validate``) before they are answered."""
    messages, offset = task["messages"], task["offset"]
    protected = set(task["protected"])
    dialect = get_dialect(task.get("format"))
    units = task_units(task)
    template = Questions.of(question_template())
    sizer = BatchSizer(task["instructions"], task["recent_evidence"])
    reasons: list[str] = []
    cands = (candidate(u, messages[u.start - offset:u.end - offset], template, dialect)
             for u in units if u.start not in protected)
    batches = fit_batches(cands, sizer, reasons)
    used_names = task.get("used_names") or {}  # a task planned before windows' bounded views had them: none
    if used_names:
        with_used_lines(batches, {c.unit.id: dialect.model_view(messages[c.unit.start - offset:c.unit.end - offset])
                                  for batch in batches for c in batch.candidates if c.omitted},
                        {unit_id: set(names) for unit_id, names in used_names.items()})
    result: dict[str, Any] = {"index": task["index"], "reasons": reasons, "ok": True, "tokens_in": 0,
                              "tokens_out": 0, "cost_usd": 0.0, "model_calls": 0, "fallbacks": []}
    values = None
    if batches:
        flow = await _run_batches(batches, task, router=router, deadline=deadline, flow_runner=flow_runner,
                                  on_event=on_event)
        values = flow.output if flow.ok and isinstance(flow.output, dict) else None
        facts = flow_facts(flow.flow_nodes)
        result.update(ok=flow.ok, tokens_in=flow.tokens_in or 0, tokens_out=flow.tokens_out or 0,
                      cost_usd=flow.cost_usd, model_calls=facts["model_calls"], fallbacks=list(facts["fallbacks"]),
                      default_cache_prices=sorted({name for node in facts["nodes"]
                                                   for name in node.default_cache_prices}))
    items = {c.unit.id: c.item for batch in batches for c in batch.candidates}
    output: list[Message] = []
    actions = {"keep": 0, "summarize": 0, "archive": 0}
    for unit in units:
        original = messages[unit.start - offset:unit.end - offset]
        action, emitted = unit_outcome(unit.id, original, items.get(unit.id), values, dialect)
        actions[action] += 1
        output.extend(emitted)
    if actions["keep"] < len(units) and dense_size(output) >= dense_size(messages):  # expansion guard
        output, actions = messages, {"keep": len(units), "summarize": 0, "archive": 0}
    # What is written is of the task's format. A ValueError fails the window: the state machine's Catch keeps it whole;
    # an inline run (CLI, S3 inline, API) fails as a whole and keeps the original. Not expected: the stream's reader
    # checked the input's roles, and summaries are written with valid ones.
    dialect.validate(output)
    result.update(messages=output, actions=actions)
    return result


async def _run_batches(batches: list[Batch], task: dict[str, Any], *, router: Any, deadline: Deadline,
                       flow_runner: Callable[..., Awaitable[Any]] | None,
                       on_event: Callable[[dict[str, Any]], None] | None) -> Any:
    settings = task["settings"]
    flow_ir, flow_input = materialise(
        batches, instructions=task["instructions"], recent_evidence=task["recent_evidence"], budget=task["budget"],
        decision_policy=settings["decision_policy_ir"], generation_policy=settings["policy_ir"],
        max_tokens=settings["max_tokens"],
        reply_max=summary_reply_limit(router, settings["policy_ir"], settings["max_tokens"]))
    admitted = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    runner = flow_runner or run_flow
    return await runner(admitted, flow_input, router=router, deadline=deadline, on_event=on_event)


def admission_probe(settings: Settings, router: Any) -> None:
    """Admit the flow of a one-unit window: raises ``FlowAdmissionError`` when the run's policies are
    not admissible, before any window runs; first ``InvalidMaxTokens`` for a negative ``max_tokens``, as one
    request refuses it (the flow's admission named a node of the preset instead)."""
    refuse_negative_max_tokens(settings.max_tokens)
    admit_request_policies(router, settings.decision_policy_ir, settings.policy_ir)  # named as the caller sent them
    batch = Batch()
    batch.add(candidate(Unit(0, 1), [{"role": "assistant", "content": "probe"}], question_template()))
    flow_ir, flow_input = materialise(
        [batch], instructions=[], recent_evidence=[], budget=BUDGET_FLOOR, decision_policy=settings.decision_policy_ir,
        generation_policy=settings.policy_ir, max_tokens=settings.max_tokens)
    admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)


# ------------------------------------------------------------------------------------- assembly


@record
class PassAssembly:
    """Concatenates one pass's window results in order: writes the messages to ``write``, follows
    explicit pins to their new indexes, and counts what happened."""

    input_bytes: int
    write: Callable[[Message], None]
    pins: tuple[int, ...] | list[int] | None = None
    output_count: int = 0
    output_bytes_sum: int = 0
    first_changed: int | None = None
    windows: int = 0
    failed_windows: int = 0
    actions: dict[str, int] = field(default_factory=lambda: {"keep": 0, "summarize": 0, "archive": 0})
    reasons: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = 0.0
    model_calls: int = 0
    fallbacks: list[str] = field(default_factory=list)  # one reason per flow node that fell back or failed
    default_cache_prices: list[str] = field(default_factory=list)  # priced by default in any window (docs/billing.md)
    new_pins: list[int] = field(default_factory=list)
    prefix_bytes: int | None = None  # dense bytes of the input's messages before ``first_changed``
    _input_sum: int = 0  # dense bytes of the input messages of the windows added so far

    def add(self, task: dict[str, Any], result: dict[str, Any] | None) -> None:
        """One window, in order; ``result`` None (a failed worker) keeps the window's original."""
        original, offset = task["messages"], task["offset"]
        self.windows += 1
        if result is None:
            self.failed_windows += 1
            # Its worker may have paid for model calls before it failed (a timeout, a crash, a result it could not
            # write): the run's cost is unknown, never a partial sum (docs/behaviour.md#cost-rules), as a degraded
            # fan-out component's is. It used to add nothing and leave the job's cost known and too low.
            self.cost_usd = None
            output = original
        else:
            output = result["messages"]
            for action, count in result["actions"].items():
                self.actions[action] += count
            self.reasons.extend(r for r in result["reasons"] if r not in self.reasons)
            self.tokens_in += result["tokens_in"]
            self.tokens_out += result["tokens_out"]
            self.model_calls += result.get("model_calls", 0)
            self.fallbacks.extend(result.get("fallbacks", ()))
            self.default_cache_prices = sorted({*self.default_cache_prices, *result.get("default_cache_prices", ())})
            cost = result.get("cost_usd")
            self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost
        if self.first_changed is None and output is not original:
            changed = first_changed_index(original, output)
            if changed is not None:
                self.first_changed = offset + changed
                before = self._input_sum + sum(dense_size(m) for m in original[:changed])
                self.prefix_bytes = 2 + before + offset + changed - 1 if offset + changed else 1
        if self.first_changed is None:
            self._input_sum += sum(dense_size(m) for m in original)
        if self.pins is not None:
            self._follow_pins(original, offset, output)
        for message in output:
            self.write(message)
            self.output_bytes_sum += dense_size(message)
        self.output_count += len(output)

    def _follow_pins(self, original: list[Message], offset: int, output: list[Message]) -> None:
        # Pinned units are always kept whole; find each pinned message in the output by identity order.
        assert self.pins is not None
        wanted = [p - offset for p in self.pins if offset <= p < offset + len(original)]
        if not wanted:
            return
        position = 0
        for local in wanted:
            while position < len(output) and output[position] is not original[local] and output[position] != original[local]:
                position += 1
            if position < len(output):
                self.new_pins.append(self.output_count + position)

    @property
    def output_bytes(self) -> int:
        return 2 + self.output_bytes_sum + max(0, self.output_count - 1)

    def summary(self) -> dict[str, Any]:
        return {"windows": self.windows, "failed_windows": self.failed_windows, "input_bytes": self.input_bytes,
                "output_bytes": self.output_bytes, **self.actions}


async def ordered_results(tasks: Iterable[dict[str, Any]], run: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
                          concurrency: int = DEFAULT_CONCURRENCY) -> AsyncIterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(task, result)`` in task order, with at most ``concurrency`` windows in flight."""
    pending: deque[tuple[dict[str, Any], asyncio.Task[dict[str, Any]]]] = deque()
    for task in tasks:
        pending.append((task, asyncio.ensure_future(run(task))))
        if len(pending) >= max(1, concurrency):
            head, future = pending.popleft()
            yield head, await future
    while pending:
        head, future = pending.popleft()
        yield head, await future


# ----------------------------------------------------------------------------------------- driver


class ListSink:
    """A pass's output kept in memory."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def write(self, message: Message) -> None:
        self.messages.append(message)

    def close(self) -> Callable[[], Iterable[Message]]:
        messages = self.messages
        return lambda: messages


@record
class RunState:
    """Where a windowed run stands between passes; JSON (``as_dict``/``from_dict``) so the steps of
    the S3 path's state machine carry it from one invocation to the next."""

    settings: Settings
    pins: list[int] | None = None
    number: int = 0  # passes finished
    original_bytes: int | None = None
    target_bytes: int | None = None
    input_bytes: int = 0  # of the pass running
    passes: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    first_changed: int | None = None
    preserved_prefix_bytes: int | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = 0.0
    model_calls: int = 0
    fallbacks: list[str] = field(default_factory=list)  # of every window and pass (a state saved before has none)
    default_cache_prices: list[str] = field(default_factory=list)  # of every window and pass (docs/billing.md)

    @classmethod
    def begin(cls, settings: Settings) -> "RunState":
        return cls(settings, pins=None if settings.pinned_indices is None else list(settings.pinned_indices))

    def pass_settings(self) -> Settings:
        pins = None if self.pins is None else tuple(self.pins)
        return Settings(**{**self.settings.__dict__, "pinned_indices": pins})

    def scan(self, messages: Iterable[Message], reread: Callable[[], Iterable[Message]] | None = None) -> PassContext:
        """The context of the next pass over ``messages`` (its input; ``reread()`` reads it again, for a format
        whose scan reads it twice: :func:`scan`)."""
        context = scan(messages, self.pass_settings(), target_bytes=self.target_bytes, reread=reread)
        if self.original_bytes is None:
            self.original_bytes, self.target_bytes = context.input_bytes, context.target_bytes
            self.preserved_prefix_bytes = context.input_bytes
        self.input_bytes = context.input_bytes
        return context

    def assembly(self, write: Callable[[Message], None]) -> PassAssembly:
        return PassAssembly(self.input_bytes, write, self.pins)

    def finish_pass(self, assembly: PassAssembly) -> tuple[bool, bool]:
        """Record a finished pass: ``(advance, more)``: whether its output replaces its input, and
        whether another pass should run."""
        self.number += 1
        self.passes.append(assembly.summary())
        self.tokens_in += assembly.tokens_in
        self.tokens_out += assembly.tokens_out
        self.model_calls += assembly.model_calls
        self.fallbacks.extend(assembly.fallbacks)
        self.default_cache_prices = sorted({*self.default_cache_prices, *assembly.default_cache_prices})
        self.cost_usd = None if self.cost_usd is None or assembly.cost_usd is None else self.cost_usd + assembly.cost_usd
        self.reasons.extend(r for r in assembly.reasons if r not in self.reasons)
        gain = self.input_bytes - assembly.output_bytes
        if assembly.first_changed is None or gain <= 0:
            return False, False  # nothing changed: this pass's input stays the result
        if self.first_changed is None or assembly.first_changed < self.first_changed:
            self.first_changed = assembly.first_changed
            self.preserved_prefix_bytes = assembly.prefix_bytes
        if self.pins is not None:
            self.pins = list(assembly.new_pins)
        assert self.target_bytes is not None
        more = (assembly.output_bytes > self.target_bytes and gain >= MIN_PASS_GAIN * self.input_bytes
                and self.number < MAX_PASSES)
        return True, more

    def compaction(self) -> dict[str, Any]:
        """The ``compaction`` block of the response body."""
        output_bytes = _final_bytes(self.passes) if self.first_changed is not None else self.original_bytes
        assert output_bytes is not None and self.target_bytes is not None
        return with_fallbacks({
            "original_bytes": self.original_bytes,
            "output_bytes": output_bytes,
            "target_bytes": self.target_bytes,
            "target_ratio": self.settings.target_ratio,
            "target_met": output_bytes <= self.target_bytes,
            "reasons": list(self.reasons),
            "flow_fingerprint": None,
            "first_changed_index": self.first_changed,
            "preserved_prefix_bytes": self.preserved_prefix_bytes,
            "windows": {"passes": list(self.passes)},
        }, self.fallbacks)

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        data["settings"] = {**self.settings.__dict__, "pinned_indices": None if self.settings.pinned_indices is None
                            else list(self.settings.pinned_indices)}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunState":
        """The state ``data`` saved, its lists copied: a pass it finishes leaves ``data`` as it was (the last
        ``assemble`` saves the run state it read again, beside the final one: ``compactor.large_jobs``)."""
        settings = dict(data["settings"])
        if settings.get("pinned_indices") is not None:
            settings["pinned_indices"] = tuple(settings["pinned_indices"])
        copied = {key: list(value) if type(value) is list else value for key, value in data.items()}
        return cls(**{**copied, "settings": Settings(**settings)})


@record
class WindowedRun:
    """The outcome of :func:`compact_windowed`: where the final messages are and the run's state."""

    source: Callable[[], Iterable[Message]]
    state: RunState

    @property
    def compaction(self) -> dict[str, Any]:
        return self.state.compaction()


async def compact_windowed(source: Callable[[], Iterable[Message]], settings: Settings, *,
                           run_window: Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]],
                           new_sink: Callable[[], Any] = ListSink, concurrency: int = DEFAULT_CONCURRENCY,
                           on_event: Callable[[dict[str, Any]], None] | None = None) -> WindowedRun:
    """Passes of windowed compaction over ``source()`` (a fresh iterator of the transcript's messages
    each call). ``run_window`` compacts one task (None: the window keeps its original); each pass's
    output goes to a ``new_sink()`` (``write``, then ``close`` gives the next pass's source)."""
    state = RunState.begin(settings)
    current = source
    more = True
    while more:
        context = state.scan(current(), reread=current)
        sink = new_sink()
        assembly = state.assembly(sink.write)
        async for task, result in ordered_results(windows(current(), context, state.pass_settings()), run_window,
                                                  concurrency):
            assembly.add(task, result)
            if on_event is not None:
                on_event({"event": "window", "pass": state.number + 1, "window": task["index"] + 1,
                          "input_bytes": context.input_bytes, "offset": task["offset"], "count": context.count})
        output = sink.close()
        advance, more = state.finish_pass(assembly)
        if advance:
            current = output
    return WindowedRun(current, state)


def _final_bytes(passes: list[dict[str, Any]]) -> int:
    """Bytes of the last pass that changed something (a pass with no gain leaves its input)."""
    for entry in reversed(passes):
        if entry["output_bytes"] < entry["input_bytes"]:
            return entry["output_bytes"]
    return passes[0]["input_bytes"]
