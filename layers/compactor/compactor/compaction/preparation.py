"""Decision-mode preparation: candidates, evidence views, budget and greedy batching (docs/behaviour.md#decision).

Pure and deterministic: no I/O and no model calls.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import field
from typing import Any

from compactor.chat import Message, chat_reading, content_text, role_of
from compactor.decision_validation import DECISION_REQUEST_MAX_BYTES as DECISION_PAYLOAD_MAX_BYTES
from compactor.jsonutil import (ascii_dumps, ascii_wire_size, dense_dumps, dense_join, dense_join_size, dense_size,
                                dense_str_size, dense_with_plain_member_at, json_text_size,
                                utf8_len)
from compactor.markers import EVIDENCE_MARKER, RECENT_MARKER
from compactor.records import record
from compactor.compaction.salience import (batch_hint, escapes_plainly, hint_order, last_uses, later_dense_size,
                                          message_names, name_offsets, names_in_translated, quoted_actions,
                                          sized_later_block, text_wire_size, translated)
from compactor.compaction.units import Unit, instruction_pins, tail_indexes, with_dialect_tail
from compactor.formats import get_dialect
from compactor.formats.base import Dialect

MAX_CANDIDATES = 128
MAX_BATCHES = 32
# Fragments a batch takes: PER_BATCH always; up to MAX_PER_BATCH while one summary reply holds the summaries
# of them all (batch_size_limit). Fewer, larger batches repeat the shared state less (docs/performance.md).
PER_BATCH = 8
MAX_PER_BATCH = 16
MAX_SUMMARY_RECORD_BYTES = 50_000
# A unit whose item does not fit one summary record alone is sent as its bounded view (the head and tail of each
# long string around an omitted-bytes marker, formats/bounded.py), its entry within this share of the
# record, so that several such units share a batch (docs/behaviour.md "Limits and reasons").
OVERSIZED_PER_RECORD = 4
MAX_FLOW_INPUT_BYTES = 900_000
BUDGET_FLOOR, BUDGET_CAP = 128, 1_048_576
# A fragment's evidence over EVIDENCE_EXCERPT_OVER characters is excerpted to its first and last
# EVIDENCE_HALF: the call and the start of its output, the end of the output with its exit code and errors.
EVIDENCE_EXCERPT_OVER = 1200
EVIDENCE_HALF = 600
RECENT_EXCERPT_OVER = 1000
RECENT_HALF = 500
# The decision state's bounded view of the pinned messages (docs/differences.md): the task (the first
# pinned user message) in full up to TASK_VIEW_CHARS, every other pin excerpted to PIN_VIEW_CHARS, and all
# of it within INSTRUCTIONS_VIEW_BYTES so that pins alone never fill a decision payload.
TASK_VIEW_CHARS = 3000
PIN_VIEW_CHARS = 600
INSTRUCTIONS_VIEW_BYTES = 5_000
# The ``later`` block of a batch's decision state: what happens after the batch (names used again, the
# later actions that touch the batch's names), within LATER_MAX_BYTES on the ASCII wire and only in the
# room the batch leaves under the payload and flow-input limits (batching never changes for it).
LATER_MAX_BYTES = 3000
_LATER_KEY_BYTES = 16  # ``, "later": `` on the wire
_LATER_DENSE_KEY_BYTES = 9  # ``,"later":`` in the dense form
# The default recent tail (no ``keep_recent`` in the request, docs/differences.md): the last
# ``keep_recent`` messages, but only as many of them (at least the last) as fit in this share of the target.
TAIL_TARGET_SHARE = 0.3
PIN_MARKER = " [... {omitted} of {total} characters of this pinned message omitted here; it is kept verbatim] "

REASON_CONTEXT = "fragment_or_decision_context_limit"
REASON_FRAGMENTS = "fragment_limit"
REASON_BATCHES = "batch_limit"
REASON_FLOW_INPUT = "flow_input_limit"


@record  # not frozen: a frozen dataclass sets each of its nine fields through object.__setattr__, about
# 1 µs more per candidate (docs/performance.md); nothing changes a candidate once it is built
class Candidate:
    """A unit that may go, with what sending and keeping it costs."""

    unit: Unit
    evidence: str
    question: dict[str, Any]
    item: str  # compact JSON of the model view of the unit's messages: what the summarizer sees
    size: int  # compact bytes of the unit's messages as they are: what keeping them costs
    decision_bytes: int  # ASCII wire bytes of its fragment entry + question entry in a decision payload
    record_bytes: int  # compact bytes of its ``"id":"<item>"`` entry in the summary record
    # the same entry with the unit's own compact JSON, its base64 payloads shown by their markers as in the view:
    # what batching counts (docs/performance.md, docs/formats.md "Images and files")
    bound_bytes: int
    state_bytes: int  # compact bytes of its fragment entry in the flow input's state
    # bytes of the unit's strings its item leaves out: a unit too big for a summary record is sent as its bounded
    # view (formats/bounded.py; docs/behaviour.md "Limits and reasons"), 0 for every other
    omitted: int = 0


@record
class Batch:
    """Candidates asked about in one decision call, and their sizes."""

    candidates: list[Candidate] = field(default_factory=list)
    decision_bytes: int = 0  # sums over the candidates
    record_bytes: int = 0
    bound_bytes: int = 0
    state_bytes: int = 0
    names: list[str] = field(default_factory=list)  # salience hint: its names that later messages use
    later: dict[str, Any] = field(default_factory=dict)  # the state's ``later`` block (docs/offline-offers.md)
    later_bytes: int | None = None  # its ASCII wire size, when the preparation measured it (for materialise)

    def ids(self) -> list[str]:
        return [c.unit.id for c in self.candidates]

    def add(self, cand: Candidate) -> None:
        self.candidates.append(cand)
        self.decision_bytes += cand.decision_bytes
        self.record_bytes += cand.record_bytes
        self.bound_bytes += cand.bound_bytes
        self.state_bytes += cand.state_bytes


@record
class Preparation:
    """A request taken apart for the decision: units, what is protected, candidates and budgets."""

    units: list[Unit]
    protected: set[str]  # unit ids
    candidates: list[Unit]
    instructions: list[Message]
    recent_evidence: list[str]
    original_bytes: int
    target_bytes: int
    budget: int
    batches: list[Batch]
    reasons: list[str]
    pinned: set[str] = field(default_factory=set)  # unit ids holding a pinned message (the rest of
    # ``protected`` is the kept tail)
    message_sizes: list[int] = field(default_factory=list)  # dense size of each message, measured once
    flow_input_bytes: int | None = None  # dense size of the flow input the batches make (preset.materialise)


def excerpt(text: str, over: int, half: int, marker: str) -> tuple[str, bool]:
    if len(text) <= over:
        return text, False
    return text[:half] + marker + text[-half:], True


def _pin_excerpt(text: str, limit: int, length: int) -> str:
    """``text`` (a pin's :func:`pin_text`, ``length`` characters whole) excerpted to ``limit`` characters."""
    if length <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    marker = PIN_MARKER.format(omitted=length - head - tail, total=length)
    return text[:head] + marker + (text[-tail:] if tail else "")


PinText = tuple[str, str, int]
"""A pinned message as the instructions show it: its role, its content text (only its ends when it is long: all an
excerpt shows of it) and that text's whole length."""


def pin_text(message: Message) -> PinText:
    """What :func:`pins_view` needs of a pinned message, holding at most ``2 × TASK_VIEW_CHARS`` of its text: a
    windowed scan keeps it for the whole transcript (``compaction/windows.py``)."""
    text = content_text(message.get("content")) if isinstance(message, dict) else ""
    length = len(text)
    if length > 2 * TASK_VIEW_CHARS:  # an excerpt shows at most its first and last TASK_VIEW_CHARS
        text = text[:TASK_VIEW_CHARS] + text[-TASK_VIEW_CHARS:]
    return role_of(message), text, length


def pin_view_bytes(pin: PinText) -> int:
    """Dense bytes of the largest entry :func:`pins_view` makes of ``pin`` (as the task, in full up to
    ``TASK_VIEW_CHARS``)."""
    role, text, length = pin
    return dense_size({"role": role, "content": _pin_excerpt(text, TASK_VIEW_CHARS, length)})


def instructions_view(messages: list[Message], pins: list[int]) -> list[Message]:
    """What the decision state shows of the pinned messages: ``{"role", "content"}`` each, bounded."""
    return pins_view([pin_text(messages[i]) for i in pins])


def pins_view(pins: list[PinText]) -> list[Message]:
    """:func:`instructions_view` of the pins' :func:`pin_text`, in order: the task (the first user pin) in full up to
    ``TASK_VIEW_CHARS``, the others excerpted to ``PIN_VIEW_CHARS``, halved until the whole fits
    ``INSTRUCTIONS_VIEW_BYTES`` (or reaches 64 and 1000)."""
    task = next((k for k, (role, _, _) in enumerate(pins) if role == "user"), None)
    task_limit, pin_limit = TASK_VIEW_CHARS, PIN_VIEW_CHARS
    while True:
        view = [{"role": role, "content": _pin_excerpt(text, task_limit if k == task else pin_limit, length)}
                for k, (role, text, length) in enumerate(pins)]
        if ascii_wire_size(view) <= INSTRUCTIONS_VIEW_BYTES or (pin_limit <= 64 and task_limit <= 1000):
            return view
        pin_limit = max(64, pin_limit // 2)
        if ascii_wire_size(view) > 2 * INSTRUCTIONS_VIEW_BYTES or pin_limit == 64:
            task_limit = max(1000, task_limit // 2)


def recent_view(unit_messages: list[Message], dialect: Dialect | None = None, view_json: str | None = None) -> str:
    """One recent-evidence entry: compact JSON of the unit's model view (``view_json`` when the caller has
    it), excerpted over 1000 characters. Without ``view_json``, the view is encoded with its long strings cut
    to their ends (:func:`_clipped`): the same excerpt."""
    if view_json is None:
        view = (dialect or get_dialect(None)).model_view(unit_messages)
        view_json = dense_dumps(_clipped(view, _RECENT_KEEP))
    return excerpt(view_json, RECENT_EXCERPT_OVER, RECENT_HALF, RECENT_MARKER)[0]


# Strings longer than twice this are cut to their first and last _EVIDENCE_KEEP characters before the
# evidence is encoded: every character encodes to at least one, so the JSON keeps its first and last
# EVIDENCE_HALF characters, and it is still over EVIDENCE_EXCERPT_OVER (docs/performance.md). The same for
# the recent evidence's excerpt (_RECENT_KEEP).
_EVIDENCE_KEEP = max(EVIDENCE_HALF, EVIDENCE_EXCERPT_OVER // 2 + 1)
_RECENT_KEEP = max(RECENT_HALF, RECENT_EXCERPT_OVER // 2 + 1)


def _clipped(value: Any, keep: int | None = None) -> Any:
    """``value`` with each string over twice ``keep`` (default _EVIDENCE_KEEP) characters cut to its ends."""
    if keep is None:
        keep = _EVIDENCE_KEEP
    if isinstance(value, str):
        return value if len(value) <= 2 * keep else value[:keep] + value[-keep:]
    if isinstance(value, dict):  # a plain string member is cut here, without a call per member
        return {key: (item if len(item) <= 2 * keep else item[:keep] + item[-keep:]) if type(item) is str
                else _clipped(item, keep) for key, item in value.items()}
    if isinstance(value, list):
        return [_clipped(item, keep) for item in value]
    return value


# A message whose content is an ASCII string over this many characters is measured without encoding it
# (jsonutil.dense_str_size), and encoded only when it is in a candidate: a kept one (a large pinned prompt,
# the last tool output) needs only its size and, in the recent tail, the ends of its JSON (docs/performance.md).
LONG_CONTENT = 16_384


def _long_content_size(message: Message) -> int | None:
    """The dense size of ``message`` when its content is a long ASCII string, computed without encoding the
    content; None otherwise."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or len(content) <= LONG_CONTENT or not content.isascii():
        return None
    return utf8_len(dense_dumps({**message, "content": ""})) - 2 + dense_str_size(content)


# A message whose content is an ASCII string of more than PLAIN_CONTENT characters (and at most LONG_CONTENT: the
# names scan cuts a longer one a piece at a time) gets its content translated for the names scan when it is
# encoded, once: the translation, kept for the scan, also tells whether the ``unicode_escape`` codec escapes the
# content as the encoder does (no control character but tab, newline and return, no DEL), and then the codec
# escapes it, about twice as fast as the encoder (docs/performance.md).
PLAIN_CONTENT = 1024


def _dense_message(message: Message, index: int, translations: dict[int, bytes], plain_at: dict[int, int]) -> str:
    """``dense_dumps(message)``; a content as above is translated into ``translations[index]`` on the way, and when
    the codec escapes it and it is the message's last member, ``plain_at[index]`` is where its escaped text starts
    in the message's dense JSON (it ends before the closing ``"}``: :func:`evidence_view`)."""
    content = message.get("content") if type(message) is dict else None
    if type(content) is not str or not PLAIN_CONTENT < len(content) <= LONG_CONTENT or not content.isascii():
        return dense_dumps(message)
    translation = translations[index] = translated(content)
    if escapes_plainly(translation):
        text, start = dense_with_plain_member_at(message, "content", content)
        if next(reversed(message)) == "content":
            plain_at[index] = start
        return text
    return dense_dumps(message)


def evidence_view(unit_messages: list[Message], dense_texts: list[str] | None = None,
                  content_at: int | None = None) -> tuple[str, bool]:
    """ASCII JSON of the unit; an excerpt (and no ``archive`` choice) when over EVIDENCE_EXCERPT_OVER characters.
    ``dense_texts``: each message's dense JSON when the caller has it; a message whose JSON is no longer than
    a string that gets cut holds none and is encoded as it is, without looking into it. ``content_at``: the last
    message's last member is its content, escaped plainly (:func:`_dense_message`: ASCII without DEL, so alike in
    the ASCII form) in its dense JSON from there to the closing ``"}``; its text is cut from there instead of
    escaped again (docs/performance.md)."""
    if dense_texts is not None and content_at is not None:
        return _evidence_around(unit_messages, dense_texts, content_at)
    if dense_texts is None:
        clipped = _clipped(unit_messages)
    else:
        clipped = [message if len(text) <= 2 * _EVIDENCE_KEEP else _clipped(message)
                   for message, text in zip(unit_messages, dense_texts, strict=True)]
    return excerpt(ascii_dumps(clipped), EVIDENCE_EXCERPT_OVER, EVIDENCE_HALF, EVIDENCE_MARKER)


def _evidence_around(unit_messages: list[Message], dense_texts: list[str], start: int) -> tuple[str, bool]:
    """:func:`evidence_view` with ``content_at`` (``start``): the unit's ASCII JSON is ``head`` (the unit encoded
    with an empty content, up to the content's opening quote; long strings cut as above), the content's escaped
    text (``text[start:end]``, whole: the excerpt is that of the whole JSON whichever long strings are cut) and
    ``"}]``; only its ends are put together."""
    text = dense_texts[-1]
    end = len(text) - 2
    values = [message if len(dense) <= 2 * _EVIDENCE_KEEP else _clipped(message)
              for message, dense in zip(unit_messages[:-1], dense_texts[:-1], strict=True)]
    shell = {**unit_messages[-1], "content": ""}  # its dense JSON is the message's without the content's text
    values.append(shell if len(text) - (end - start) <= 2 * _EVIDENCE_KEEP else _clipped(shell))
    head = ascii_dumps(values)[:-3]
    if len(head) + end - start + 3 <= EVIDENCE_EXCERPT_OVER:
        return head + text[start:end] + '"}]', False
    first = (head[:EVIDENCE_HALF] + text[start:min(end, start + EVIDENCE_HALF)])[:EVIDENCE_HALF]
    tail = (head[-EVIDENCE_HALF:] + text[max(start, end - EVIDENCE_HALF):end] + '"}]')[-EVIDENCE_HALF:]
    return first + EVIDENCE_MARKER + tail, True


def fragment_question(template: dict[str, Any], excerpted: bool) -> dict[str, Any]:
    if not excerpted:
        return template
    criteria = {k: v for k, v in template["criteria"].items() if k != "archive"}
    return {**template, "criteria": criteria}


def summary_budget(target: int, retained: int, candidates: int) -> int:
    per = (target - retained) // max(1, candidates) - 100
    return min(BUDGET_CAP, max(BUDGET_FLOOR, per))


def decision_guidance() -> str:
    """How to classify a fragment: sent once per batch in the state (the shared, cacheable prefix of every
    decision request of a compaction) instead of once per question (docs/performance.md)."""
    from compactor.compaction.preset import load_preset  # the preset module imports this one

    return load_preset()["guidance"]


def batch_state(prep_instructions: list[Message], recent: list[str], batch: list[Candidate],
                later: dict[str, Any] | None = None) -> dict[str, Any]:
    """The decision state of a batch; ``later`` (when there is any) tells what happens after the batch."""
    state: dict[str, Any] = {
        "guidance": decision_guidance(),
        "instructions": prep_instructions,
        "recent_evidence": recent,
        "fragments": [{"id": c.unit.id, "bytes": c.size, "evidence": c.evidence} for c in batch],
    }
    if later:
        state["later"] = later
    return state


def batch_questions(batch: list[Candidate]) -> dict[str, Any]:
    return {c.unit.id: c.question for c in batch}


def batch_items(batch: list[Candidate]) -> dict[str, str]:
    return {c.unit.id: c.item for c in batch}


class BatchSizer:
    """Exact serialised sizes of a batch, kept incrementally instead of re-serialising the batch.

    A JSON array or object of n members costs its empty form plus the members plus n−1 separators
    (``", "`` in the ASCII wire form, ``","`` in the compact form).
    """

    def __init__(self, instructions: list[Message], recent: list[str],
                 payload_max_bytes: int = DECISION_PAYLOAD_MAX_BYTES,
                 summary_max_bytes: int = MAX_SUMMARY_RECORD_BYTES, per_batch: int = PER_BATCH) -> None:
        self.payload_max_bytes = payload_max_bytes
        self.summary_max_bytes = summary_max_bytes
        self.per_batch = per_batch  # the most fragments a batch takes
        self.decision_base = ascii_wire_size({"state": batch_state(instructions, recent, []), "questions": {}})
        self.state_base = dense_size(batch_state(instructions, recent, []))

    def decision_payload(self, batch: Batch, extra: Candidate | None = None) -> int:
        n = len(batch.candidates) + (extra is not None)
        members = batch.decision_bytes + (extra.decision_bytes if extra else 0)
        return self.decision_base + members + (4 * (n - 1) if n else 0)

    def summary_record(self, batch: Batch, extra: Candidate | None = None, *, bound: bool = False) -> int:
        """Bytes of the batch's summary record; with ``bound``, as if each item were the unit's own JSON."""
        n = len(batch.candidates) + (extra is not None)
        members = (batch.bound_bytes + (extra.bound_bytes if extra else 0) if bound
                   else batch.record_bytes + (extra.record_bytes if extra else 0))
        return 2 + members + (n - 1 if n else 0)

    def admissible(self, batch: Batch, extra: Candidate | None = None) -> bool:
        return (self.decision_payload(batch, extra) <= self.payload_max_bytes
                and self.summary_record(batch, extra, bound=True) <= MAX_SUMMARY_RECORD_BYTES
                and self.summary_record(batch, extra) <= self.summary_max_bytes)

    def flow_input_entry(self, key: str, batch: Batch) -> int:
        """Bytes of ``"<key>":{"state":…,"items":…}`` in the compact flow input."""
        n = len(batch.candidates)
        state = self.state_base + batch.state_bytes + (n - 1 if n else 0)
        return len(key) + 3 + len('{"state":,"items":}') + state + self.summary_record(batch)


# The fragment entry ``{"id":…,"bytes":…,"evidence":…}`` around its values, in each form.
_FRAGMENT_WIRE = len('{"id": , "bytes": , "evidence": }')
_FRAGMENT_DENSE = len('{"id":,"bytes":,"evidence":}')


@record(frozen=True)
class Questions:
    """A question template's question for a whole fragment and for an excerpted one, each with its ASCII
    wire size: built once per preparation, shared by its candidates."""

    whole: dict[str, Any]
    whole_bytes: int
    excerpted: dict[str, Any]
    excerpted_bytes: int

    @classmethod
    def of(cls, template: dict[str, Any]) -> Questions:
        excerpted = fragment_question(template, True)
        return cls(template, ascii_wire_size(template), excerpted, ascii_wire_size(excerpted))


def candidate(unit: Unit, unit_messages: list[Message], template: dict[str, Any] | Questions,
              dialect: Dialect | None = None, record_max: int = MAX_SUMMARY_RECORD_BYTES) -> Candidate:
    """The candidate of ``unit`` (whose messages are ``unit_messages``) with its exact serialised sizes.

    The models see the dialect's model view (docs/performance.md): the evidence and the item to summarize
    leave out what the agent's model never reads. The fragment's ``bytes`` and the summary record's bound
    count the unit as it is, so what keeping it costs and how batches are cut do not depend on the view."""
    view = (dialect or get_dialect(None)).model_view(unit_messages)
    view_texts = [dense_dumps(v) for v in view]
    item = dense_join(view_texts)
    whole = item if view is unit_messages else dense_dumps(unit_messages)
    questions = template if isinstance(template, Questions) else Questions.of(template)
    return measured_candidate(unit, view, view_texts, item, whole, questions,
                              bound=batching_text(unit_messages, dialect or get_dialect(None)), record_max=record_max)


def batching_text(unit_messages: list[Message], dialect: Dialect) -> str | None:
    """The dense JSON batching counts for a unit holding base64 payloads: its messages as they are, each payload
    shown by its marker as in the models' view (``Dialect.media_shown``); ``None`` (the unit's own JSON) when it
    holds none. A screenshot's base64 reaches no model, so it must not make its unit too big to send: a unit
    holding a 100 KB screenshot was over the summary record's 50,000 bytes, never sent, and kept."""
    shown = [dialect.media_shown(m) for m in unit_messages]
    if all(a is b for a, b in zip(shown, unit_messages)):
        return None
    return dense_join([dense_dumps(m) for m in shown])


def measured_candidate(unit: Unit, view: list[Message], view_texts: list[str], item: str, whole: str,
                       questions: Questions, content_at: int | None = None, bound: str | None = None,
                       record_max: int = MAX_SUMMARY_RECORD_BYTES) -> Candidate:
    """The candidate of ``unit`` from its model ``view``, the dense JSON of each view item (``view_texts``), of
    the view (``item``) and of the unit as it is (``whole``): its sizes are computed from those texts, never
    by encoding them again. ``content_at``: as in :func:`evidence_view`. ``bound``: the text batching counts
    when it is not ``whole`` (:func:`batching_text`). ``record_max``: the bytes of a batch's summary record; a
    unit whose entry does not fit one alone gets its ``formats.bounded.bounded_item`` (its evidence and size stay
    the unit's own)."""
    evidence, excerpted = evidence_view(view, view_texts, content_at)
    question, question_bytes = ((questions.excerpted, questions.excerpted_bytes) if excerpted
                                else (questions.whole, questions.whole_bytes))
    size = utf8_len(whole)
    if bound is None:
        bound = whole
    key_bytes = len(unit.id) + 2  # ids are ASCII, quoted
    value_bytes = key_bytes + len(str(size)) + json_text_size(evidence)  # the evidence is ASCII: wire = dense
    item_bytes = json_text_size(item)  # the flow input holds it as a string (the summary prompt embeds it as JSON)
    record_bytes = key_bytes + 1 + item_bytes
    bound_bytes = key_bytes + 1 + (item_bytes if bound is item else json_text_size(bound))
    omitted = 0
    if 2 + bound_bytes > MAX_SUMMARY_RECORD_BYTES or 2 + record_bytes > record_max:  # too big to send as it is
        from compactor.formats.bounded import bounded_item  # only such a unit pays its import (docs/performance.md)

        bounded = bounded_item(view, bounded_entry_limit(record_max) - key_bytes - 1, item_bytes)
        if bounded is not None:
            item, omitted = bounded
            record_bytes = bound_bytes = key_bytes + 1 + json_text_size(item)
    return Candidate(
        unit, evidence, question, item, size,
        decision_bytes=_FRAGMENT_WIRE + value_bytes + key_bytes + 2 + question_bytes,
        record_bytes=record_bytes, bound_bytes=bound_bytes,
        state_bytes=_FRAGMENT_DENSE + value_bytes, omitted=omitted,
    )


def bounded_entry_limit(record_max: int) -> int:
    """The most bytes the summary record entry of a unit's bounded view takes: a share of the record
    (``OVERSIZED_PER_RECORD``), so that that many of them fit one batch's record (with its braces and commas)."""
    return (min(record_max, MAX_SUMMARY_RECORD_BYTES) - 2) // OVERSIZED_PER_RECORD - 1


def batch_size_limit(budget: int, reply_bytes: int | None) -> int:
    """The most fragments a batch takes: ``PER_BATCH``, or more (up to ``MAX_PER_BATCH``) while one summary
    reply of ``reply_bytes`` holds their summaries at ``budget`` bytes each; ``PER_BATCH`` when the reply's
    room is not known."""
    if reply_bytes is None:
        return PER_BATCH
    return max(PER_BATCH, min(MAX_PER_BATCH, reply_bytes // max(1, budget)))


def bounded_tail(request: Any) -> bool:
    """Whether ``request`` (a ``CompactRequest``) gets the default tail bounded by bytes: it did not set
    ``keep_recent`` (an explicit value is followed exactly)."""
    return "keep_recent" not in request.model_fields_set


def tail_length(last_sizes: Sequence[int], limit: int | None) -> int:
    """How many of the last messages (``last_sizes``: their dense sizes, in order) the tail protects: all of
    them, or with a byte ``limit`` only as many as fit in it (each with its comma), and always the last one."""
    if limit is None or not last_sizes:
        return len(last_sizes)
    count, used = 1, last_sizes[-1] + 1
    while count < len(last_sizes) and used + last_sizes[-count - 1] + 1 <= limit:
        count += 1
        used += last_sizes[-count] + 1
    return count


def prepare(messages: list[Message], *, keep_recent: int, target_ratio: float,
            pinned_indices: list[int] | None, question_template: dict[str, Any],
            payload_max_bytes: int = DECISION_PAYLOAD_MAX_BYTES,
            summary_max_bytes: int = MAX_SUMMARY_RECORD_BYTES, dialect: Dialect | None = None,
            bounded: bool = False, reply_bytes: int | None = None, salience: bool = True) -> Preparation:
    """``messages`` are the items of ``dialect``'s format (default ``openai-chat``, docs/formats.md);
    ``payload_max_bytes`` bounds each batch's decision payload and ``summary_max_bytes`` its summary
    record (smaller for deciders and summarizers with a small context, docs/providers.md); ``bounded``:
    the tail is the default one, bounded by bytes (:func:`bounded_tail`); ``reply_bytes``: the summaries
    one summary reply can hold, which lets batches grow past ``PER_BATCH`` (:func:`batch_size_limit`);
    ``salience`` False: the batches get no hints and no ``later`` blocks (the names scan is about half the
    work), for a caller that reads only which limits left candidates out (the blocks only fill the room
    the batches leave, so the batches and ``reasons`` are the same)."""
    dialect = dialect or get_dialect(None)
    units = dialect.split_units(messages)
    pins = instruction_pins(messages, pinned_indices, dialect)
    # Each message is serialised once: its dense text gives every size and item below (docs/performance.md);
    # a long ASCII content is measured, and encoded below only when its message is in a candidate.
    long_sizes = [_long_content_size(m) for m in messages]
    translations: dict[int, bytes] = {}  # the contents translated for the names scan (_dense_message), by index
    plain_at: dict[int, int] = {}  # where a content the codec escaped starts in its text, when it is last, by index
    texts: list[Any] = [_dense_message(m, i, translations, plain_at) if long is None else None
                        for i, (m, long) in enumerate(zip(messages, long_sizes))]
    sizes = [utf8_len(text) if long is None else long for text, long in zip(texts, long_sizes)]
    original_bytes = dense_join_size(sizes)
    target = int(original_bytes * target_ratio)
    last = sizes[-max(1, keep_recent):]
    tail = tail_indexes(len(messages), tail_length(last, int(target * TAIL_TARGET_SHARE)) if bounded else len(last))
    tail = with_dialect_tail(tail, messages, units, dialect)
    protected_idx = set(pins) | set(tail)
    protected = {u.id for u in units if not protected_idx.isdisjoint(u.indexes())}
    candidates = [u for u in units if u.id not in protected]
    kept = [i for u in units if u.id in protected for i in u.indexes()]
    unencoded = {i for i, text in enumerate(texts) if text is None}
    if unencoded:
        unencoded.intersection_update(kept)  # the kept ones stay unencoded; a candidate's are encoded
        for i, text in enumerate(texts):
            if text is None and i not in unencoded:
                texts[i] = dense_dumps(messages[i])
    instructions = instructions_view(messages, pins)
    views = [dialect.model_view([m]) for m in messages]  # what the models see, item by item
    # A view item equal to its message is the message with nothing left out: the same JSON (formats/base.py).
    view_texts = [[] if i in unencoded
                  else [texts[i]] if len(view) == 1 and (view[0] is messages[i] or _same_json(view[0], messages[i]))
                  else [dense_dumps(v) for v in view] for i, view in enumerate(views)]

    # messages whose one view item has the message's own text (the common case): their unit's item is its JSON
    plain = [len(texts_i) == 1 and texts_i[0] is texts[i] for i, texts_i in enumerate(view_texts)]

    def unit_view_texts(unit: Unit) -> list[str]:
        return [text for i in unit.indexes() for text in view_texts[i]]

    def measured(unit: Unit) -> Candidate:
        """The unit's candidate from the dense JSON of its view items, of its view and of the unit as it is
        (one text when they are the same)."""
        start, end = unit.start, unit.end
        own = texts[start:end]
        whole = dense_join(own)
        if all(plain[start:end]):  # each view item has its message's JSON: the messages are the view
            view, cand = messages[start:end], measured_candidate(
                unit, messages[start:end], own, whole, whole, questions, plain_at.get(end - 1),
                record_max=summary_max_bytes)
        else:
            item_texts = unit_view_texts(unit)
            view = [v for i in unit.indexes() for v in views[i]]
            cand = measured_candidate(unit, view, item_texts, dense_join(item_texts), whole, questions,
                                      bound=batching_text(messages[start:end], dialect), record_max=summary_max_bytes)
        if cand.omitted:  # sent as its bounded view: the salience scan may add lines of its middle
            bounded_views[unit.id] = view
        return cand

    bounded_views: dict[str, list[Message]] = {}  # the model view of each unit sent as its bounded view, by id
    recent: list[str] = []
    for unit in units:
        if unit.id in protected and unit.end > tail.start:
            if unencoded and not unencoded.isdisjoint(unit.indexes()):
                recent.append(recent_view(messages[unit.start:unit.end], dialect))
            else:
                recent.append(recent_view(messages[unit.start:unit.end], view_json=dense_join(unit_view_texts(unit))))

    retained = dense_join_size([sizes[i] for u in units if u.id in protected for i in u.indexes()])
    budget = summary_budget(target, retained, len(candidates))

    reasons: list[str] = []
    if len(candidates) > MAX_CANDIDATES:
        reasons.append(REASON_FRAGMENTS)
    sizer = BatchSizer(instructions, recent, payload_max_bytes, summary_max_bytes,
                       batch_size_limit(budget, reply_bytes))
    questions = Questions.of(question_template)
    used = fit_batches(map(measured, largest_candidates(messages, candidates, sizes)), sizer, reasons)
    if salience:
        action_items = None
        if not dialect.chat_items:  # names and actions read from the chat messages the items are (docs/formats.md)
            views = [[message for item in view for message in chat_reading(item)] for view in views]
            view_texts = [[] for _ in views]
            action_items = [next((m for m in view if m.get("role") == "assistant"), {}) for view in views]
        else:  # the calls as the models read them: base64 in their arguments by its marker (docs/formats.md)
            action_items = [view[0] if view else {} for view in views]
        scanned = _add_salience(messages, views, view_texts, used, kept, sizer, translations, action_items)
        if bounded_views and scanned is not None:
            names, last_use = scanned
            with_used_lines(used, bounded_views, {c.unit.id: used_later(c.unit, names, last_use)
                                                  for batch in used for c in batch.candidates
                                                  if c.unit.id in bounded_views})
    pin_set = set(pins)
    pinned_units = {u.id for u in units if not pin_set.isdisjoint(u.indexes())}
    return Preparation(units=units, protected=protected, pinned=pinned_units, candidates=candidates,
                       instructions=instructions,
                       recent_evidence=recent, original_bytes=original_bytes, target_bytes=target,
                       budget=budget, batches=used, reasons=reasons, message_sizes=sizes,
                       flow_input_bytes=flow_input_size(used, sizer))


def flow_input_size(batches: list[Batch], sizer: BatchSizer) -> int:
    """Dense bytes of the flow input of ``batches`` (``{"batch_<i>": {"state": …, "items": …}}``, each state
    with its ``later`` block when it has one), from the sizes measured while batching."""
    return dense_join_size([sizer.flow_input_entry(f"batch_{i}", batch)
                            + (_LATER_DENSE_KEY_BYTES + (dense_size(batch.later) if batch.later_bytes is None
                                                         else later_dense_size(batch.later, batch.later_bytes))
                               if batch.later else 0)
                            for i, batch in enumerate(batches)])


def _same_json(view_item: Message, message: Message) -> bool:
    """Whether a view item, which keeps its message's key order, serialises as the message does."""
    return view_item == message and list(view_item) == list(message)


def largest_candidates(messages: list[Message], candidates: list[Unit], message_sizes: list[int] | None = None
                       ) -> list[Unit]:
    """The candidates one request considers, in order: all of them, or past ``MAX_CANDIDATES`` the
    largest (the ones left out are the smallest, which summarizing would barely shrink; docs/differences.md).
    ``message_sizes``: the messages' dense sizes when the caller has them."""
    if len(candidates) <= MAX_CANDIDATES:
        return candidates
    sizes = {u.id: dense_size(messages[u.start:u.end]) if message_sizes is None
             else dense_join_size(message_sizes[u.start:u.end]) for u in candidates}
    chosen = set(sorted(candidates, key=lambda u: (-sizes[u.id], u.start))[:MAX_CANDIDATES])
    return [u for u in candidates if u in chosen]


def fit_batches(candidates: Iterable[Candidate], sizer: BatchSizer, reasons: list[str]) -> list[Batch]:
    """Greedy batches of ``candidates`` within the per-request limits (batch count, flow input bytes);
    the reason of each limit hit is appended to ``reasons``."""
    batches = _greedy_batches(candidates, sizer, reasons)
    if len(batches) > MAX_BATCHES:
        reasons.append(REASON_BATCHES)
        batches = batches[:MAX_BATCHES]
    used: list[Batch] = []
    flow_input_bytes = 2  # "{}"
    for index, batch in enumerate(batches):
        added = sizer.flow_input_entry(f"batch_{index}", batch) + (1 if used else 0)
        if flow_input_bytes + added > MAX_FLOW_INPUT_BYTES:
            reasons.append(REASON_FLOW_INPUT)
            break
        flow_input_bytes += added
        used.append(batch)
    return used


def view_names(message: Message, dialect: Dialect) -> set[str]:
    """The names of one message as the salience scan reads them: in its model view, the chat messages of a format's
    items (``chat_reading``) for a format whose items are not chat messages. What :func:`prepare` finds of each
    message (by a shorter way), for a windowed run's scan (compaction/windows.py), which reads one message at a
    time."""
    view = dialect.model_view([message])
    if not dialect.chat_items:
        view = [chat for item in view for chat in chat_reading(item)]
    return _view_names(view, [])


def used_later(unit: Unit, names: Sequence[set[str]], last_use: dict[str, int]) -> set[str]:
    """The names of ``unit`` (``names[i]``: message i's) that a later message uses again (``last_use``: the index of
    the last message using each name)."""
    last = unit.end - 1
    return {name for i in unit.indexes() for name in names[i] if last_use[name] > last}


def with_used_lines(batches: list[Batch], bounded_views: dict[str, list[Message]], used: dict[str, set[str]]) -> None:
    """Each bounded view (``bounded_views``, the model view of each unit sent as one, by unit id) made again with the
    lines of its middle that name ``used[unit id]`` (the names a later message uses again: :func:`used_later`),
    within the bytes its item took: the batches' sizes only shrink, so every limit they were cut by still holds."""
    from compactor.formats.bounded import bounded_item

    for batch in batches:
        for cand in batch.candidates:
            view = bounded_views.get(cand.unit.id)
            names = used.get(cand.unit.id)
            if view is None or not names:
                continue
            key_bytes = len(cand.unit.id) + 3
            found: dict[str, list[int]] = {}  # each long string searched once, however many cuts are tried

            def marks(text: str, names: set[str] = names, found: dict[str, list[int]] = found) -> list[int]:
                offsets = found.get(text)
                if offsets is None:
                    offsets = found[text] = name_offsets(text, names)
                return offsets

            bounded = bounded_item(view, cand.record_bytes - key_bytes, None, marks)
            if bounded is None:
                continue
            item, omitted = bounded
            entry = key_bytes + json_text_size(item)
            if entry > cand.record_bytes:
                continue
            batch.record_bytes += entry - cand.record_bytes
            batch.bound_bytes += entry - cand.bound_bytes
            cand.item, cand.omitted, cand.record_bytes, cand.bound_bytes = item, omitted, entry, entry


def _add_salience(messages: list[Message], views: list[list[Message]], view_texts: list[list[str]],
                  batches: list[Batch], kept: list[int], sizer: BatchSizer,
                  translations: dict[int, bytes] | None = None, action_items: list[Message] | None = None
                  ) -> tuple[list[set[str]], dict[str, int]] | None:
    """Each batch's salience hint (its names that a later message uses again, in the batch or after it,
    less those the kept messages already carry) and its ``later`` block: those names and the actions
    after the batch that touch its names (a re-read, a re-run, a rewrite). ``translations``: contents
    translated for the names scan already, by message index (:func:`_dense_message`); ``action_items``:
    each message's assistant chat message, where the format's items are not chat messages (``chat_reading``).
    Returns the names of each message and the last use of each name (``None`` without batches)."""
    if not batches:
        return None
    # Each message scanned once, hidden reasoning left out (``views``: docs/formats.md); not those before the
    # first batch that are not kept: a name there is either in a batch message too, whose own index it
    # never exceeds, or in none (docs/performance.md).
    first = min(c.unit.start for batch in batches for c in batch.candidates)
    kept_set = set(kept)
    translations = translations or {}
    names = [_message_names(messages[i], view, texts, translations.get(i)) if i >= first or i in kept_set else set()
             for i, (view, texts) in enumerate(zip(views, view_texts, strict=True))]
    lasts = [max(c.unit.end for c in batch.candidates) - 1 for batch in batches]
    last_use = last_uses(names)
    carried = set().union(*(names[i] for i in kept)) if kept else set()
    flow_room = MAX_FLOW_INPUT_BYTES - 2 - sum(sizer.flow_input_entry(f"batch_{i}", b) + 1
                                               for i, b in enumerate(batches))
    # the actions after a batch (the only ones quoted), each with its JSON and its names
    actions = quoted_actions(messages if action_items is None else action_items, min(lasts) + 1)
    quoted = {i: text for i, text, _ in actions}
    action_sizes = {i: text_wire_size(text) for i, text in quoted.items()}  # each measured once, not per batch
    action_indexes = [i for i, _, _ in actions]  # in order: a batch looks only at those after it
    for batch, last in zip(batches, lasts):
        indexes = [i for c in batch.candidates for i in c.unit.indexes()]
        found = set().union(*[names[i] for i in indexes])
        used = {name for i in indexes for name in names[i] if last_use[name] > i} - carried
        batch.names = batch_hint(hint_order(used))
        touching = [i for i, _, names in actions[bisect_right(action_indexes, last):] if not found.isdisjoint(names)]
        room = min(LATER_MAX_BYTES, sizer.payload_max_bytes - sizer.decision_payload(batch),
                   flow_room) - _LATER_KEY_BYTES
        if room <= 0:
            batch.later = {}
            continue
        batch.later, later_bytes = sized_later_block(batch.names, [quoted[i] for i in touching], room,
                                                     [action_sizes[i] for i in touching])
        batch.later_bytes = later_bytes
        flow_room -= later_bytes + _LATER_KEY_BYTES if batch.later else 0
    return names, last_use


def _message_names(message: Message, view: list[Message], texts: list[str], translation: bytes | None) -> set[str]:
    """:func:`_view_names` of a message; from its content's ``translation`` (:func:`_dense_message`) when its
    names are its content's (its model view is one item with that content and no tool calls) and the content
    holds no ``<`` (the names scan leaves tags out first)."""
    if translation is None or len(view) != 1:
        return _view_names(view, texts)
    item = view[0]
    if (type(item) is not dict or item.get("content") is not message["content"] or item.get("tool_calls")
            or "function_call" in item or "<" in message["content"]):
        return _view_names(view, texts)
    return names_in_translated(translation)


def _view_names(view: list[Message], texts: list[str]) -> set[str]:
    """The names of one message's model view items; ``texts``: their dense JSON when encoded (else empty)."""
    if len(view) == 1:
        return message_names(view[0], texts[0] if texts else None)
    return set().union(*(message_names(item, text) for item, text in zip(view, texts or [None] * len(view),
                                                                          strict=True)))


def _greedy_batches(candidates: Iterable[Candidate], sizer: BatchSizer, reasons: list[str]) -> list[Batch]:
    batches: list[Batch] = []
    open_batch = Batch()
    for cand in candidates:
        if len(open_batch.candidates) >= sizer.per_batch:
            batches.append(open_batch)
            open_batch = Batch()
        if sizer.admissible(open_batch, cand):
            open_batch.add(cand)
            continue
        if open_batch.candidates:
            batches.append(open_batch)
            open_batch = Batch()
        if sizer.admissible(open_batch, cand):
            open_batch.add(cand)
        else:
            reasons.append(REASON_CONTEXT)
    if open_batch.candidates:
        batches.append(open_batch)
    return batches
