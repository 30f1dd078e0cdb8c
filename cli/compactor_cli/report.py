"""The human report of ``compactor compact``: live progress while model calls run, then a fragment table."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any, TextIO

from compactor.call_record import MODEL_NODE_KINDS, CallRecord
from compactor.chat import call_function, content_text, role_of
from compactor.compaction.preparation import DECISION_PAYLOAD_MAX_BYTES, REASON_CONTEXT, RECENT_EXCERPT_OVER
from compactor.jsonutil import dense_size
from compactor.markers import NAME_CHARS, short_name  # noqa: F401 (NAME_CHARS: the cut's length, for its readers)
from compactor.provider_failures import failure_causes, fallback_count

INVISIBLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u061c\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufe00-\ufe0d\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f\U000e0100-\U000e01ef]")
"""Characters a report would not show as they are: controls but tab and line ends (the HTML parser drops a NUL; a
terminal runs escape sequences), bidirectional formatting (an override reorders the text after it), zero-width and
other invisible format characters, tag characters (text hidden from readers but not from models), variation
selectors other than the emoji ones, and lone surrogates (not encodable). The HTML page shows each as a visible
``U+XXXX`` mark, the text report as an escape (docs/report.md). The zero-width joiners (U+200C, U+200D) stay: emoji
and several scripts need them."""


def visible(text: str) -> str:
    """``text`` for a terminal: each :data:`INVISIBLE` character and each carriage return written as a Python escape
    (``\\x1b``, ``\\u202e``), so that a transcript's escape sequences cannot move the cursor, erase the report's
    lines or print others over them."""
    def escaped(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return INVISIBLE.sub(escaped, text.replace("\r", "\\r"))


class _StreamProgress:
    """Progress lines on ``stream``: rewritten in place on a terminal, sparse otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()


class Progress(_StreamProgress):
    """Counts model nodes as they finish; one rewritten line on a terminal, sparse lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.total = 0
        self.done = 0
        self.failed = 0

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "plan":
            self.total = 2 * int(event.get("batches", 0))
            self._write(f"{event.get('candidates', 0)} candidate fragments in {event.get('batches', 0)} batches")
            return
        if event.get("kind") not in MODEL_NODE_KINDS or event.get("event") != "node_finished":
            return
        self.done += 1
        if event.get("outcome") not in (None, "ok", "skipped"):
            self.failed += 1
        line = f"model calls: {self.done}/{self.total or '?'} done"
        if self.failed:
            line += f", {self.failed} fell back"
        line += f"  ({time.monotonic() - self.started:.1f}s)"
        self._write(line, transient=True)

    def _write(self, line: str, transient: bool = False) -> None:
        if self.tty and transient:
            self.stream.write("\r\033[K" + line)
        elif not transient or self.done == self.total:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self.done:
            self.stream.write("\n")
            self.stream.flush()


class WindowProgress(_StreamProgress):
    """One line per pass, rewritten per window on a terminal (windowed compaction of large files)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.last = 0.0

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") != "window":
            return
        now = time.monotonic()
        line = (f"pass {event['pass']}: window {event['window']} at message {event['offset']}/{event['count']}"
                f"  ({now - self.started:.1f}s)")
        if self.tty:
            self.stream.write("\r\033[K" + line)
        elif now - self.last >= 5 or event["window"] == 1:
            self.stream.write(line + "\n")
        else:
            return
        self.last = now
        self.stream.flush()


def render_windowed_report(record: CallRecord, seconds: float) -> str:
    """The report of a windowed run (no per-fragment table: units change between passes)."""
    compaction = record.report or {}
    lines: list[str] = []
    for number, entry in enumerate(compaction["windows"]["passes"], start=1):
        lines.append(f"pass {number}: {entry['windows']} windows ({entry['failed_windows']} failed);"
                     f" keep {entry['keep']}  summarize {entry['summarize']}  archive {entry['archive']};"
                     f" bytes {entry['input_bytes']} -> {entry['output_bytes']}")
    lines.append(f"bytes: {compaction['original_bytes']} -> {compaction['output_bytes']}"
                 f" ({_pct(compaction['output_bytes'], compaction['original_bytes'])} of original);"
                 f" target {compaction['target_bytes']} ({compaction['target_ratio']:g})"
                 f" {'met' if compaction['target_met'] else 'not met'}")
    if compaction["reasons"]:
        lines.append("reasons: " + ", ".join(compaction["reasons"]))
    lines.append(f"tokens: {record.tokens_in or 0} in, {record.tokens_out or 0} out")
    cost = record.cost_usd
    lines.append(f"model calls: {record.model_calls}; cost: {'unknown' if cost is None else f'${cost:.6f}'}"
                 f" ({record.cost_basis or 'no basis'})")
    if record.fallbacks:  # one per window flow node that fell back or failed: the windows keep their units
        kinds = Counter(record.fallbacks)
        lines.append(f"problems: {len(record.fallbacks)} model call{'s' if len(record.fallbacks) != 1 else ''} fell"
                     f" back ({', '.join(f'{kind} x{count}' for kind, count in kinds.most_common())}); their windows"
                     " kept those units (compactor doctor --catalog FILE --call checks the offers)")
    lines.append(f"time: {seconds:.2f}s")
    return "\n".join(lines) + "\n"


def _roles(messages: list[dict[str, Any]]) -> str:
    roles: list[str] = []
    for message in messages:
        role = str(message.get("role") or message.get("type"))
        if message.get("tool_calls"):
            role += f"[{len(message['tool_calls'])} call{'s' if len(message['tool_calls']) > 1 else ''}]"
        roles.append(role)
    text = ",".join(roles)
    return text if len(text) <= 28 else text[:27] + "…"


def unit_rows(messages: list[dict[str, Any]], body: dict[str, Any], units: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """One row per unit of a decision-mode body: its manifest entry with its reason (the core's ``units``
    event; the response's own manifest may be bounded), its original and emitted messages, and their dense
    bytes (each message's JSON plus the commas between them, without the list brackets)."""
    output = body["input"] if "input" in body else body["messages"]  # openai-responses: "input"
    rows: list[dict[str, Any]] = []
    cursor = 0
    for entry in units:
        original = messages[entry["start"]:entry["end"]]
        count = {"keep": len(original), "summarize": 1, "archive": 1 if entry.get("handle") else 0}[entry["action"]]
        emitted = output[cursor:cursor + count]
        cursor += count
        rows.append({**entry, "original": original, "emitted": emitted,
                     "before": dense_size(original) - 2, "after": dense_size(emitted) - 2 if emitted else 0})
    return rows


def context_limit_hint(left_out: int, tail_units: int) -> str:
    """Why ``left_out`` units were not sent (``fragment_or_decision_context_limit``: a unit that fits no batch even
    alone), and what to do. A unit's own size is seldom it: a big unit is sent as its bounded view
    (docs/offline-offers.md "Units too big for one record") and its decision evidence is an excerpt. What fills the
    decider's payload is what every decision request repeats: the pins' excerpts and an excerpt of each unit of the
    recent tail, so a long tail (``--keep-recent 60`` on a 132-message transcript: 31 units, every unit left out) or
    many pins leave no room for a unit's question; so does a decider (or summarizer) whose ``context`` is small
    (docs/behaviour.md "Limits and reasons"). The hint said "did not fit a 32 000-byte decision payload; pin fewer
    messages" from before the pins' view was bounded and big units were sent as bounded views, and only when no unit
    was sent: a long tail, the usual cause now, was not named."""

    def spaced(number: int) -> str:
        return f"{number:,}".replace(",", " ")

    return (f"hint: {left_out} unit{'s' if left_out != 1 else ''} could not be sent even alone: every decision request"
            f" repeats excerpts of the pinned messages and up to about {spaced(RECENT_EXCERPT_OVER)} bytes of each of"
            f" the {tail_units} units of the recent tail, within the decider's {spaced(DECISION_PAYLOAD_MAX_BYTES)}"
            " bytes (fewer for a decider with a small context; a summarizer with one holds less of each unit);"
            " protect a shorter tail (--keep-recent), pin fewer messages (--pin, --pin-task) or use models with a"
            " larger context")


def render_report(request: Any, record: CallRecord, seconds: float, units: list[dict[str, Any]]) -> str:
    """The report of one compaction, from its record (and ``units``, the whole manifest with reasons)."""
    compaction = record.report or {}
    if "windows" in compaction:
        return render_windowed_report(record, seconds)
    messages, body = request.messages, record.body
    output = body["input"] if "input" in body else body["messages"]  # openai-responses: "input"
    lines: list[str] = []
    if "fragments" in compaction:  # decision mode
        rows = unit_rows(messages, body, units)
        lines.append(f"{'fragment':<16} {'messages':>9}  {'roles':<28} {'action':<9} {'bytes':>8} {'after':>8}  reason")
        for row in rows:
            span = f"{row['start']}-{row['end'] - 1}" if row["end"] - row["start"] > 1 else str(row["start"])
            lines.append(f"{row['id']:<16} {span:>9}  {_roles(row['original']):<28} {row['action']:<9}"
                         f" {row['before']:>8} {row['after']:>8}  {row['reason']}"
                         + (f" ({row['decider_reason']})" if row.get("decider_reason") else ""))
        actions = Counter(row["action"] for row in rows)
        original_bytes, output_bytes = compaction["original_bytes"], compaction["output_bytes"]
        lines.append("")
        lines.append(f"{len(rows)} units: keep {actions['keep']}, summarize {actions['summarize']},"
                     f" archive {actions['archive']}  (a unit is one message, or a tool call with its results;"
                     " its id is fragment_<first message index>, so ids skip the results' numbers)")
        lines.append(f"compacted: {original_bytes} -> {output_bytes} bytes of dense JSON,"
                     f" {_pct(original_bytes - output_bytes, original_bytes)} smaller"
                     + (f" ({original_bytes / output_bytes:.1f}x less to send)"
                        if output_bytes and original_bytes / output_bytes >= 1.05 else ""))
        by_reason: Counter[str] = Counter()
        for row in rows:
            by_reason[row["reason"]] += row["after"]
        lines.append(f"target: {compaction['target_bytes']} bytes (ratio {compaction['target_ratio']:g})"
                     f" {'met' if compaction['target_met'] else 'not met'}; output bytes by reason: "
                     + (", ".join(f"{reason} {size}" for reason, size in by_reason.most_common() if size) or "none"))
        if compaction["reasons"]:
            counts = Counter(compaction["reasons"])
            lines.append("limits: " + ", ".join(f"{r} x{n}" if n > 1 else r for r, n in counts.items()))
            if counts.get(REASON_CONTEXT):
                lines.append(context_limit_hint(counts[REASON_CONTEXT],
                                                sum(1 for row in rows if row["reason"] == "recent_tail")))
        limits = compaction.get("limits")
        if limits:
            lines.append(f"made of: pins {limits['pins_bytes']}, tail {limits['tail_bytes']}, kept units "
                         f"{limits['kept_units_bytes']}, summaries {limits['summaries_bytes']} bytes;"
                         + (f" most from {limits['limited_by']};" if limits["limited_by"] else "")
                         + f" smallest reachable ratio {limits['smallest_ratio']:g} (every candidate archived)")
        changed = compaction.get("first_changed_index")
        if changed is None:
            lines.append("prompt cache: nothing changed")
        else:
            lines.append(f"prompt cache: the first {changed} messages are unchanged, a preserved prefix of"
                         f" {compaction.get('preserved_prefix_bytes')} bytes a provider's cache can still reuse;"
                         f" the first changed message is {changed}")
    else:
        before, after = dense_size(messages), dense_size(output)
        lines.append(f"{request.mode_name}: {'compacted' if body['compacted'] else 'unchanged'};"
                     f" messages {len(messages)} -> {len(output)}; bytes {before} -> {after}"
                     f" ({_pct(after, before)} of the original, {_pct(before - after, before)} smaller)")
    if record.nodes:
        cost = record.cost_usd
        lines.append(f"cost: {'unknown' if cost is None else f'${cost:.6f}'} ({record.cost_basis or 'no basis'})")
        if record.flow_fingerprint is not None:  # a flow ran: its nodes
            nodes = record.nodes
            lines.append(f"flow nodes: {len(nodes)}, fallbacks/errors: {sum(1 for n in nodes if n.fell_back)}")
            served = Counter(f"{n.trace.get('served_model_id')} ({n.kind})" for n in nodes
                             if n.kind in MODEL_NODE_KINDS and n.trace.get("served_model_id"))
            if served:
                lines.append("models: " + ", ".join(f"{name} x{count}" for name, count in sorted(served.items())))
    else:
        lines.append("cost: none (no model call)")
    lines.extend(problem_lines(record))
    lines.append(f"time: {seconds:.2f}s")
    return visible("\n".join(lines) + "\n")  # a model's reason and a provider's words among them


def base_url_of(offer_id: str) -> str | None:
    from compactor.catalog import CatalogError, get_catalog

    try:
        offer = get_catalog().offer(offer_id)
    except CatalogError:
        return None
    return offer.base_url if offer is not None else None


def problem_lines(record: CallRecord) -> list[str]:
    """The fallbacks and failed calls grouped by cause, in plain words with the offer and the fix."""
    causes = failure_causes(record.nodes, base_url_of)
    if not causes:
        return []
    fallbacks = fallback_count(record.nodes)
    lines = [f"problems: {fallbacks} model call{'s' if fallbacks != 1 else ''} fell back"]
    for cause, count in causes:
        lines.append(f"  {cause.cause} (offer {cause.offer}, x{count})")
        lines.append(f"    fix: {cause.fix}")
    return lines


def _line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else f"{text[:width]}… (+{len(text) - width} chars)"


def render_examples(messages: list[dict[str, Any]], body: dict[str, Any], units: list[dict[str, Any]], count: int,
                    width: int = 110) -> str:
    """The ``count`` summaries that saved the most bytes, each under the start of its original."""
    rows = [row for row in unit_rows(messages, body, units) if row["action"] == "summarize"]
    rows.sort(key=lambda row: row["after"] - row["before"])
    lines = []
    for row in rows[:count]:
        lines.append(f"--- {row['id']} (messages {row['start']}-{row['end'] - 1}):"
                     f" {row['before']} -> {row['after']} bytes")
        lines.append("original:")
        for message in row["original"]:
            text = content_text(message.get("content"))
            if text:
                lines.append(f"  {short_name(role_of(message))}: {_line(text, width)}")
            for call in message.get("tool_calls") or []:
                function = call_function(call) or {}  # a function's call, or a custom tool's (its input)
                lines.append(f"  call {short_name(function.get('name'))}: "
                             f"{_line(str(function.get('arguments')), width)}")
        lines.append("summary:")
        lines.extend(f"  {line}" for line in str(row["emitted"][0].get("content")).splitlines())
    return visible("\n".join(lines) + "\n") if lines else ""  # a transcript's and a model's text


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"
