"""The visual report of ``compactor compact --html FILE``: one self-contained HTML page (docs/report.md).

The page is static HTML with inline CSS and a few lines of optional JavaScript (filters, expand all):
no network access, readable without scripts, keyboard- and screen-reader-friendly. Each unit's original
is shown inside a closed ``<details>`` (the browser does not lay it out until opened) and long message
texts are cut to a head and a tail with the number of bytes left out. Past FULL_ROWS units, each unit is one
line in closed pages, so that a transcript of many short items gives a page smaller than itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from html import escape
from typing import Any

from compactor.call_record import MODEL_NODE_KINDS, CallRecord
from compactor.chat import call_function, content_text, role_of
from compactor.compaction.reassembly import UNIT_REASONS
from compactor.jsonutil import dense_size
from compactor.provider_failures import calls_fell_back

from compactor_cli.report import INVISIBLE, short_name, unit_rows

TEXT_HEAD = 1200
"""Characters shown from the start of a long message text; TEXT_TAIL from its end."""
TEXT_TAIL = 400
SEAL_REASONS = {
    "pinned": "keep: the system prompt opening the conversation is never sealed",
    "recent_tail": "keep: inside the protected recent tail (keep_recent)",
    "sealed": "summarize: the aged middle of the conversation, sealed into one summary",
    "not_sealed": "keep: nothing was sealed (too short, or the summary was not smaller)",
}
MASK_REASONS = {
    "masked": "summarize: an old tool output, replaced by a one-line placeholder that names its call",
    "not_masked": "keep: no tool output, or one inside the protected recent tail or pinned",
}
PROTECTED = ("pinned", "recent_tail")


def _n(value: int) -> str:
    """A byte count with thin-space thousands separators (readable, and one token for screen readers)."""
    return f"{value:,}".replace(",", "\u202f")


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"


def _text(text: str, markup: bool = True) -> str:
    """Untrusted ``text`` (a transcript's, a tool's, a model's) for the page's text, never an attribute value:
    escaped (``<``, ``>`` and ``&``; quotes mean nothing in text, and JSON is full of them), each :data:`INVISIBLE`
    character shown as a ``U+XXXX`` mark (in a ``<span class="cc">`` where markup is allowed)."""
    escaped = escape(text, quote=False)
    if markup:
        return INVISIBLE.sub(lambda m: f'<span class="cc">U+{ord(m.group()):04X}</span>', escaped)
    return INVISIBLE.sub(lambda m: f"[U+{ord(m.group()):04X}]", escaped)


def _inline(text: str) -> str:
    """Untrusted ``text`` among the page's own words, isolated (``<bdi>``) so that right-to-left text in it cannot
    reorder theirs. Text that is all ASCII once marked (:func:`_text`) has no right-to-left character and needs no
    isolation: most names are, and a page of many units has one or two on each line."""
    shown = _text(text)
    return shown if shown.isascii() else f"<bdi>{shown}</bdi>"


def _clip(text: str) -> str:
    """``text`` for the page (:func:`_text`), cut to a head and a tail around a note of how many bytes are not
    shown."""
    if len(text) <= TEXT_HEAD + TEXT_TAIL + 200:
        return _text(text)
    hidden = len(text[TEXT_HEAD:-TEXT_TAIL].encode("utf-8", "surrogatepass"))
    return (f"{_text(text[:TEXT_HEAD])}<span class=\"cut\">… {_n(hidden)} bytes not shown …</span>"
            f"{_text(text[-TEXT_TAIL:])}")


def _calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _tool_names(messages: list[dict[str, Any]]) -> list[str]:
    names = []
    for message in messages:
        for call in _calls_of(message):
            function = call_function(call) or {}  # a function's call, or a custom tool's
            names.append(str(function.get("name") or call.get("type") or "tool"))
    return names


def _who(messages: list[dict[str, Any]]) -> str:
    """Who speaks in a unit, as HTML: its first role, the tools it calls (each isolated) and its results."""
    roles = [short_name(role_of(m)) for m in messages]
    tools = _tool_names(messages)
    text = _inline(roles[0]) if roles else "—"
    if tools:
        counts = Counter(tools)
        text += " → " + ", ".join(_inline(short_name(name)) + ("" if n == 1 else f" ×{n}") for name, n in counts.items())
    results = roles[1:].count("tool")  # a unit that is one tool message is not "tool + 1 result"
    if results:
        text += f" + {results} result{'s' * (results > 1)}"
    return text


def _message_html(message: dict[str, Any]) -> str:
    parts = [f'<div class="msg"><span class="role">{_inline(short_name(role_of(message)))}</span>']
    for call in _calls_of(message):
        function = call_function(call) or {}  # a function's call, or a custom tool's (its input)
        arguments = function.get("arguments")
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        parts.append(f'<pre class="call"><b>{_inline(short_name(function.get("name") or "call"))}</b> {_clip(arguments)}</pre>')
    text = content_text(message.get("content"))
    if text:
        parts.append(f"<pre>{_clip(text)}</pre>")
    parts.append("</div>")
    return "".join(parts)


def seal_rows(messages: list[dict[str, Any]], body: dict[str, Any], keep_recent: int,
              items_format: str | None = None) -> list[dict[str, Any]]:
    """Rows of a seal-mode body: the frozen system prompt, the sealed middle and the kept tail, as the seal of
    ``items_format`` (default ``openai-chat``) split them: each format has its own frozen items and tail
    (docs/formats.md)."""
    from compactor.compaction.seal import plan_seal
    from compactor.formats import get_dialect

    plan = plan_seal(messages, keep_recent, get_dialect(items_format)) if body.get("compacted") else None
    if plan is None:
        return [{**_row(0, messages, messages, "keep", "not_sealed"), "id": "conversation"}]
    rows = []
    start = 0
    output = body["input"] if "input" in body else body["messages"]  # openai-responses: "input"
    for part, action, reason, emitted in (
            (plan.frozen, "keep", "pinned", plan.frozen),
            # the sealed span, with the always-pinned items kept right after the summary (plan.held)
            (messages[len(plan.frozen):len(messages) - len(plan.recent)], "summarize", "sealed",
             output[len(plan.frozen):len(plan.frozen) + 1 + len(plan.held)]),
            (plan.recent, "keep", "recent_tail", plan.recent)):
        if part:
            rows.append(_row(start, part, emitted, action, reason))
        start += len(part)
    return rows


def mask_rows(messages: list[dict[str, Any]], body: dict[str, Any], report: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of a mask-mode body: each masked item, and the runs of items between them."""
    output = body["input"] if "input" in body else body["messages"]  # openai-responses: "input"
    rows, start = [], 0
    for index in [*sorted({entry["index"] for entry in report["masked"]}), len(messages)]:
        if index > start:
            rows.append(_row(start, messages[start:index], output[start:index], "keep", "not_masked"))
        if index < len(messages):
            rows.append(_row(index, messages[index:index + 1], output[index:index + 1], "summarize", "masked"))
        start = index + 1
    return rows


def _row(start: int, original: list[dict[str, Any]], emitted: list[dict[str, Any]], action: str,
         reason: str) -> dict[str, Any]:
    """One row of the page: messages ``start``… and what the output holds for them, with their dense bytes."""
    return {"id": f"messages_{start}", "start": start, "end": start + len(original), "action": action,
            "reason": reason, "original": original, "emitted": emitted,
            "before": dense_size(original) - 2, "after": dense_size(emitted) - 2 if emitted else 0}


OUTCOME_WORDS = {"ok": "ok", "skipped": "skipped", "deadline": "skipped", "fallback": "fell back", "error": "failed"}
"""How the page names each ``NodeOutcome.outcome``."""


def _model_calls(record: CallRecord) -> list[dict[str, Any]]:
    """Each model call: what served it, its tokens and cost, and what went wrong (fallbacks and causes)."""
    calls = []
    for node in record.nodes:
        if node.kind not in MODEL_NODE_KINDS:
            continue
        trace = node.trace
        causes = [f"{step.get('offer')}: {step.get('error_kind')}"
                  + (f" (HTTP {step['http_status']})" if step.get("http_status") else "")
                  for step in (trace.get("decision_trace") or {}).get("decision_path") or []
                  if step.get("error_kind")]
        if trace.get("error"):
            causes.append(str(trace["error"]))
        calls.append({"node": node.node, "kind": node.kind, "model": trace.get("served_model_id"),
                      "tokens_in": trace.get("tokens_in"), "tokens_out": trace.get("tokens_out"),
                      "cost": trace.get("cost_reported"), "latency_ms": trace.get("latency_ms"),
                      "outcome": OUTCOME_WORDS[node.outcome], "causes": causes})
    return calls


def render_html(messages: list[dict[str, Any]], record: CallRecord, units: list[dict[str, Any]], *,
                title: str, keep_recent: int, seconds: float | None = None, items_format: str | None = None) -> str:
    """The whole report page for one compaction (``record`` as the core returns it, ``units`` as the core's
    ``units`` event gives them) of items in ``items_format`` (the request's ``format``)."""
    body, mode, compaction = record.body, record.mode, record.report or {}
    windows = compaction.get("windows")
    if windows is not None:  # a windowed run: units change between passes, so there is no per-unit manifest
        rows, glossary = [], UNIT_REASONS
    elif "fragments" in compaction:
        rows, glossary = unit_rows(messages, body, units), UNIT_REASONS
    elif "masked" in compaction:
        rows, glossary = mask_rows(messages, body, compaction), MASK_REASONS
    else:
        rows, glossary = seal_rows(messages, body, keep_recent, items_format), SEAL_REASONS
    original, output, target = record.bytes_in or 0, record.bytes_out or 0, compaction.get("target_bytes")
    calls = _model_calls(record)
    widest = max([r["before"] for r in rows] + [1])
    counts = Counter(r["action"] for r in rows)

    out: list[str] = [_HEAD.format(title=_text(title, markup=False), css=_CSS, policy=POLICY)]
    out.append('<a class="skip" href="#units">Skip to the units</a>')
    out.append(f'<header><h1>Compaction report <span class="file">{_inline(title)}</span></h1>')
    saved = original - output
    headline = (f"{_n(original)} → {_n(output)} bytes: {_pct(saved, original)} smaller"
                + (f" ({original / output:.1f}× less to send)" if output and saved > 0 else ""))
    out.append(f'<p class="headline" id="headline">{headline}</p>')
    if windows is not None:  # no units to count: the passes, each over its windows
        passes = windows.get("passes") or []
        what = (f"{len(passes)} pass{'es' * (len(passes) != 1)} over windows: "
                + ", ".join(str(entry["windows"]) for entry in passes) + " windows")
    else:
        what = (f"{len(rows)} unit{'s' * (len(rows) != 1)}: "
                + " · ".join(f'{counts[a]} {a}' for a in ("keep", "summarize", "archive") if counts[a]))
    out.append(f'<p class="sub">{escape(mode)} mode · {what}'
               + (f" · {seconds:.2f} s" if seconds is not None else "") + "</p></header>")
    out.append("<main>")
    out.append(_overview(original, output, target, compaction, rows))
    out.append(_calls_section(record, calls))
    out.append(_passes_section(windows) if windows is not None else _units_section(rows, widest, glossary))
    out.append(_glossary(glossary))
    out.append("</main>")
    out.append(f"<script>{_JS}</script></body></html>\n")
    return "".join(out)


def _overview(original: int, output: int, target: int | None, compaction: dict[str, Any],
              rows: list[dict[str, Any]]) -> str:
    parts = ['<section aria-labelledby="overview-h"><h2 id="overview-h">Size</h2>']
    parts.append('<div class="sizes" role="img" aria-label="'
                 f'original {original} bytes, output {output} bytes'
                 + (f', target {target} bytes' if target is not None else "") + '">')
    parts.append(f'<div class="sizebar"><span class="lbl">original</span><span class="track"><span class="fill before" '
                 f'style="width:100%"></span></span><span class="num">{_n(original)} B</span></div>')
    for label, size in (("output", output), ("target", target)):
        if size is not None:
            width = 100.0 * size / original if original else 0
            parts.append(f'<div class="sizebar"><span class="lbl">{label}</span><span class="track"><span class="fill '
                         f'{label}" style="width:{width:.2f}%"></span></span><span class="num">{_n(size)} B</span></div>')
    parts.append("</div>")
    parts.append("<dl class=\"facts\">")
    if target is not None:  # decision mode, in one request or in windows
        protected = sum(r["before"] for r in rows if r["reason"] in PROTECTED)
        met = compaction["target_met"]
        why = ""
        if not met and "windows" in compaction:  # no units: pins and tail are not known here, passes are
            why = (" The run went in windows, so this page counts no units: the passes below show "
                   "what each pass took off.")
        elif not met and protected > target:
            why = (f" The pinned messages and the protected tail alone are {_n(protected)} bytes, more than the "
                   "target, so no choice of actions could reach it: pin fewer messages (<code>--pin</code>, "
                   "<code>--pin-task</code>) or protect a shorter tail (<code>--keep-recent</code>).")
        elif not met:
            why = (f" The pinned messages and the protected tail alone are {_n(protected)} bytes "
                   f"({_pct(protected, target)} of the target); the output bytes by reason below show the rest.")
        parts.append(f'<dt>Target</dt><dd id="target">{_n(target)} bytes ({compaction["target_ratio"]:g} of the '
                     f'original): <strong>{"met" if met else "not met"}</strong>.{why}</dd>')
        by_reason: Counter[str] = Counter()
        for row in rows:
            by_reason[row["reason"]] += row["after"]
        where = " · ".join(f"<code>{escape(r)}</code> {_n(b)} B" for r, b in by_reason.most_common() if b)
        if where:
            parts.append(f'<dt>Output by reason</dt><dd id="by-reason">{where}</dd>')
        changed = compaction.get("first_changed_index")
        prefix = compaction.get("preserved_prefix_bytes")
        if changed is None:
            cache = "Nothing changed: the output is the input."
        else:
            cache = (f"Messages 0–{changed - 1} come out byte-identical ({_n(prefix)} bytes of serialized prefix), "
                     f"so a provider's prompt cache for them still hits; message {changed} is the first that "
                     "differs." if changed else "The very first message changed: no prompt-cache prefix survives.")
        parts.append(f'<dt>First changed message</dt><dd id="first-changed">{cache}</dd>')
        if compaction.get("reasons"):
            limits = ", ".join(f"<code>{escape(r)}</code> ×{n}" for r, n in Counter(compaction["reasons"]).items())
            parts.append(f"<dt>Preparation limits</dt><dd>{limits}</dd>")
    if target is not None and "windows" not in compaction:
        parts.append("<dt>Unit ids</dt><dd>A unit is one message, or a tool call together with all its results. "
                     "Its id is <code>fragment_&lt;index of its first message&gt;</code>, so ids skip the numbers "
                     "of the tool results inside a unit (fragment_2 covers messages 2–3).</dd>")
    parts.append("</dl></section>")
    return "".join(parts)


def _calls_section(record: CallRecord, calls: list[dict[str, Any]]) -> str:
    """The cost and the model calls: each call's node in one request; a windowed run, whose record holds no nodes,
    by its totals over every window (``record.model_calls``, ``record.fallbacks``), as the text report says them."""
    parts = ['<section aria-labelledby="calls-h"><h2 id="calls-h">Cost and model calls</h2><dl class="facts">']
    windowed = "windows" in (record.report or {})
    if not record.nodes and not windowed:
        parts.append('<dt>Cost</dt><dd id="cost">none: no model was called</dd>')
    else:
        cost = record.cost_usd
        basis = record.cost_basis or "no basis"
        parts.append(f'<dt>Cost</dt><dd id="cost">{"unknown" if cost is None else f"${cost:.6f}"} '
                     f'({escape(str(basis))})</dd>')
    fell_back = calls_fell_back(record)  # what the text report and --strict count
    if not windowed:
        count = len(calls)
        skipped = sum(1 for node in record.nodes if node.kind in MODEL_NODE_KINDS and node.outcome == "skipped")
        line = (f'{count} call{"s" * (count != 1)}, {fell_back} with a fallback or failure'
                + (f", {skipped} skipped (not needed, nothing sent)" if skipped else ""))
    else:
        count = record.model_calls
        kinds = Counter(record.fallbacks).most_common()
        line = (f'{count} call{"s" * (count != 1)} in the windows, {fell_back} with a fallback or failure'
                + (" (" + ", ".join(f"{_text(kind)} ×{n}" for kind, n in kinds) + "; their windows kept those units)"
                   if kinds else ""))
    parts.append(f'<dt>Model calls</dt><dd id="calls">{line}</dd></dl>')
    if calls:
        parts.append('<details class="calls"><summary>Every model call</summary><div class="scroll">'
                     '<table><thead><tr><th scope="col">node</th><th scope="col">kind</th>'
                     '<th scope="col">served by</th><th scope="col">tokens in/out</th><th scope="col">cost</th>'
                     '<th scope="col">latency</th><th scope="col">outcome</th></tr></thead><tbody>')
        for call in calls:
            cost = "" if call["cost"] is None else f"${call['cost']:.6f}"
            latency = "" if call["latency_ms"] is None else f"{call['latency_ms']} ms"
            causes = "".join(f"<br><small>{_inline(c)}</small>" for c in call["causes"])
            parts.append(f'<tr class="{"bad" if call["outcome"] != "ok" else ""}"><td>{escape(str(call["node"]))}</td>'
                         f'<td>{escape(str(call["kind"]))}</td><td>{_inline(str(call["model"] or "—"))}</td>'
                         f'<td>{_text(str(call["tokens_in"] or 0))}/{_text(str(call["tokens_out"] or 0))}</td>'
                         f'<td>{cost}</td><td>{_text(latency)}</td><td>{escape(call["outcome"])}{causes}</td></tr>')
        parts.append("</tbody></table></div></details>")
    parts.append("</section>")
    return "".join(parts)


def _passes_section(windows: dict[str, Any]) -> str:
    parts = ['<section aria-labelledby="units-h" id="units"><h2 id="units-h">Passes over windows</h2>',
             "<p>This transcript was too large for one request, so it was compacted in windows (each fits one "
             "request), in passes while they still shrink it. Units change between passes, so this page shows "
             "each pass rather than each unit.</p><div class=\"scroll\"><table><thead><tr><th scope=\"col\">pass</th>"
             '<th scope="col">windows (failed)</th><th scope="col">keep</th><th scope="col">summarize</th>'
             '<th scope="col">archive</th><th scope="col">bytes in → out</th></tr></thead><tbody>']
    for number, entry in enumerate(windows.get("passes") or [], start=1):
        parts.append(f'<tr class="pass"><td>{number}</td><td>{entry["windows"]} ({entry["failed_windows"]})</td>'
                     f'<td>{entry["keep"]}</td><td>{entry["summarize"]}</td><td>{entry["archive"]}</td>'
                     f'<td>{_n(entry["input_bytes"])} → {_n(entry["output_bytes"])}</td></tr>')
    parts.append("</tbody></table></div></section>")
    return "".join(parts)


def _units_section(rows: list[dict[str, Any]], widest: int, glossary: dict[str, str]) -> str:
    """Every unit in transcript order: each in full up to :data:`FULL_ROWS` rows; past that, one line per unit in
    closed pages of :data:`PAGE_ROWS` (:func:`_pages`), so that the page stays smaller than the transcript."""
    parts = ['<section aria-labelledby="units-h" id="units"><h2 id="units-h">Units in transcript order</h2>',
             '<div class="tools" role="toolbar" aria-label="Filter and expand units">']
    for action in ("all", "summarize", "archive", "keep"):
        parts.append(f'<button type="button" data-filter="{action}" aria-pressed="{"true" if action == "all" else "false"}">'
                     f'{"show all" if action == "all" else action}</button>')
    parts.append('<button type="button" id="expand-all">expand all</button>'
                 '<button type="button" id="collapse-all">collapse all</button></div>')
    if len(rows) > FULL_ROWS:
        parts.append(_pages(rows))
    else:
        parts.append('<p class="legend"><span class="bar before"></span> bytes before '
                     '<span class="bar after keep"></span> bytes after, on one scale '
                     f'(widest unit {_n(widest)} B). <span class="badge pin">pinned</span> and '
                     '<span class="badge tail">protected tail</span> units are never sent to a model.</p>')
        parts.append('<ol class="units" aria-label="Units">')
        parts.extend(_unit(row, widest, glossary) for row in rows)
        parts.append("</ol>")
    parts.append("</section>")
    return "".join(parts)


FULL_ROWS = 500
"""Up to this many rows, each unit is shown in full (its bars, its explanation, its original and summary side by
side); past it, each is one line (:func:`_line`) in pages of PAGE_ROWS (docs/report.md "Large transcripts")."""
PAGE_ROWS = 200
LINE_TEXT = 60
"""Characters of a unit's first text shown on its line; a summary or placeholder gets LINE_EMITTED."""
LINE_EMITTED = 400


def _pages(rows: list[dict[str, Any]]) -> str:
    """The rows in closed ``<details>`` pages of PAGE_ROWS, each summed up in its ``<summary>`` (its messages, its
    units by action and its bytes before and after), so that the browser lays out only the pages opened and a filter
    hides the pages that hold none of its action (their ``has-<action>`` classes)."""
    parts = [f'<p class="legend" id="paged">{_n(len(rows))} units: too many to show each in full, so each is one '
             "line (its messages, who speaks, its reason code, its bytes, its summary and the start of its text) in "
             f"pages of {PAGE_ROWS}. Find a message by its number (<code>msg 1234</code>) or a tool by its name with "
             "the browser's search, or link to a unit by its id (<code>#fragment_1234</code>, "
             "<code>#messages_1234</code>): the page that holds it opens.</p>"]
    for first in range(0, len(rows), PAGE_ROWS):
        page = rows[first:first + PAGE_ROWS]
        counts = Counter(r["action"] for r in page)
        before, after = sum(r["before"] for r in page), sum(r["after"] for r in page)
        has = " ".join(f"has-{a}" for a in ("keep", "summarize", "archive") if counts[a])
        what = " · ".join(f"{counts[a]} {a}" for a in ("keep", "summarize", "archive") if counts[a])
        parts.append(f'<details class="page {has}"><summary>msg {page[0]["start"]}–{page[-1]["end"] - 1} · {what} · '
                     f'{_n(before)} B → {_n(after)} B</summary><ol class="units lines" start="{first + 1}">')
        parts.extend(_line(row) for row in page)
        parts.append("</ol></details>")
    return "".join(parts)


def _shorten(text: str, limit: int) -> str:
    """``text`` on one line (its runs of white space as one space), cut to ``limit`` characters and an ellipsis. Only
    a start of ``text`` is read, as long as it takes to fill the line (runs of white space can make it long): when the
    first ``limit + 1`` characters held white space, the text after them was dropped without the ellipsis."""
    end = limit + 1
    while True:
        line = " ".join(text[:end].split())
        if len(line) > limit or end >= len(text):
            return line[:limit] + "…" if len(line) > limit else line
        end *= 4


def _first_text(messages: list[dict[str, Any]]) -> str:
    """The first text in ``messages`` (a message's content, else a call's arguments)."""
    for message in messages:
        text = content_text(message.get("content"))
        if not text:
            for call in _calls_of(message):
                function = call_function(call) or {}
                arguments = function.get("arguments")
                text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
                break
        if text:
            return text
    return ""


def _line(row: dict[str, Any]) -> str:
    """One unit on one line: its messages, who speaks, its reason code (the glossary says its action and meaning), its
    bytes before and after (one figure when they are equal), the decider's reason if it gave one, its summary or
    placeholder (LINE_EMITTED characters, the rest on demand: :func:`_emitted`) and the start of its original
    (LINE_TEXT characters). Its class (``k``, ``s``, ``a``: its action) gives its colour and the filters' hold; names
    are isolated only where they need it (:func:`_inline`) and the ``</li>`` is left to the parser, so that a line
    costs little more than its texts (docs/report.md "Large transcripts")."""
    action = row["action"]
    span = f"{row['start']}–{row['end'] - 1}" if row["end"] - row["start"] > 1 else str(row["start"])
    before, after = row["before"], row["after"]
    size = f"{_n(before)} B" if before == after else f"{_n(before)} → {_n(after)} B"
    text = _first_text(row["original"])
    return (f'<li class={action[0]} id="{escape(row["id"])}"><b>msg {span}</b> {_who(row["original"])} '
            f'<code>{escape(row["reason"])}</code> {size}'
            + (f" (decider: {_inline(_shorten(str(row['decider_reason']), LINE_EMITTED))})"
               if row.get("decider_reason") else "")
            + (_emitted(_first_text(row["emitted"])) if action == "summarize" else "")
            + (f" <small>{_text(_shorten(text, LINE_TEXT))}</small>" if text else ""))


def _emitted(text: str) -> str:
    """A line's summary or placeholder: on the line up to LINE_EMITTED characters; a longer one is the ``<summary>`` of
    a closed ``<details>`` that holds the whole text, as a full row shows it (:func:`_clip`), so that a click (or the
    browser's search) completes it and a closed one costs no layout."""
    if not text:
        return ""
    head = _shorten(text, LINE_EMITTED)
    if len(head) <= LINE_EMITTED:  # not cut
        return f" <samp>{_text(head)}</samp>"
    return f" <details><summary><samp>{_text(head)}</samp></summary><pre>{_clip(text)}</pre></details>"


def _unit(row: dict[str, Any], widest: int, glossary: dict[str, str]) -> str:
    action, reason = row["action"], row["reason"]
    span = f"{row['start']}–{row['end'] - 1}" if row["end"] - row["start"] > 1 else str(row["start"])
    badges = ""
    if reason == "pinned":
        badges = '<span class="badge pin">pinned</span>'
    elif reason == "recent_tail":
        badges = '<span class="badge tail">protected tail</span>'
    explanation = escape(glossary.get(reason, reason).split(": ", 1)[-1])
    if row.get("decider_reason"):  # a model's words, read from untrusted text
        explanation += f" (the decider's reason: {_inline(str(row['decider_reason']))})"
    before, after = row["before"], row["after"]
    change = f"−{_pct(before - after, before)}" if after < before else "unchanged"
    parts = [f'<li class="unit {action}" id="{escape(row["id"])}" data-id="{escape(row["id"])}" '
             f'data-action="{action}" data-reason="{escape(reason)}" data-before="{before}" data-after="{after}">',
             f'<div class="head"><span class="uid">{escape(row["id"])}</span>'
             f'<span class="span">msg {span}</span><span class="who">{_who(row["original"])}</span>'
             f'<span class="action {action}">{action}</span>{badges}</div>',
             f'<div class="body"><p class="reason"><code>{escape(reason)}</code> {explanation}</p>',
             f'<div class="size"><div class="bars" role="img" aria-label="{before} bytes before, {after} bytes after">'
             f'<span class="bar before" style="width:{100.0 * before / widest:.2f}%"></span>'
             f'<span class="bar after {action}" style="width:{100.0 * after / widest:.2f}%"></span></div>',
             f'<p class="bytes">{_n(before)} B → {_n(after)} B <span class="delta">{change}</span></p></div></div>']
    original = "".join(_message_html(m) for m in row["original"])
    if action == "summarize":
        summary = "".join(_message_html(m) for m in row["emitted"])
        parts.append('<details class="pair"><summary>Summary beside its original</summary><div class="cols">'
                     f'<div class="col"><h3>summary ({_n(after)} B)</h3>{summary}</div>'
                     f'<div class="col"><h3>original ({_n(before)} B)</h3>{original}</div></div></details>')
    else:
        label = "Archived original (removed from the output; the caller keeps it)" if action == "archive" \
            else "Original (kept verbatim)"
        parts.append(f'<details class="pair"><summary>{label}</summary><div class="col">{original}</div></details>')
    parts.append("</li>")
    return "".join(parts)


def _glossary(glossary: dict[str, str]) -> str:
    parts = ['<section aria-labelledby="gloss-h"><h2 id="gloss-h">Reason codes</h2><dl class="gloss">']
    for code, text in glossary.items():
        action, _, explanation = text.partition(": ")
        parts.append(f"<dt><code>{escape(code)}</code> <span class=\"action {action}\">{action}</span></dt>"
                     f"<dd>{escape(explanation)}</dd>")
    parts.append("</dl></section>")
    return "".join(parts)


_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Compaction report: {title}</title>
<style>{css}</style></head><body>
"""

_CSS = """
:root{--bg:#f7f7f5;--card:#fff;--ink:#1d2330;--mute:#5b6473;--line:#e2e4e8;--keep:#5877a8;--summarize:#c27c0e;
--archive:#b8466b;--before:#c9ced6;--focus:#1b6ef3;--target:#d33}
@media (prefers-color-scheme:dark){:root{--bg:#15181e;--card:#1d2129;--ink:#e6e8ec;--mute:#9aa3b2;--line:#2e3440;
--before:#48505e;--keep:#7f9dd0;--summarize:#e0a23a;--archive:#e07399}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
header,main{max-width:1100px;margin:0 auto;padding:0 20px}
header{padding-top:24px}
h1{font-size:1.35rem;margin:0 0 4px}.file{color:var(--mute);font-weight:400;font-size:1rem;word-break:break-all}
h2{font-size:1.1rem;margin:0 0 10px}h3{font-size:.8rem;text-transform:uppercase;letter-spacing:.04em;color:var(--mute);margin:0 0 6px}
.headline{font-size:1.6rem;font-weight:650;margin:6px 0 2px}.sub{color:var(--mute);margin:0 0 16px}
section{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 18px;margin:0 0 16px}
code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.skip{position:absolute;left:-999px}.skip:focus{left:12px;top:8px;background:var(--card);padding:6px 10px;z-index:9}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
.sizes{display:grid;gap:6px;margin-bottom:12px}
.sizebar{display:grid;grid-template-columns:70px 1fr 110px;align-items:center;gap:10px}
.lbl,.num{color:var(--mute);font-size:.85rem}.num{text-align:right;font-variant-numeric:tabular-nums}
.track{position:relative;height:18px;background:transparent}
.fill{position:absolute;inset:0 auto 0 0;border-radius:4px}.fill.before{background:var(--before)}.fill.output{background:var(--summarize)}
.fill.target{background:none;border:2px dashed var(--target);border-radius:4px}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:6px 16px;margin:0}
.facts dt{font-weight:600}.facts dd{margin:0}
.tools{display:flex;flex-wrap:wrap;gap:6px;margin-bottom:8px}
button{font:inherit;font-size:.85rem;padding:4px 12px;border-radius:999px;border:1px solid var(--line);
background:var(--card);color:var(--ink);cursor:pointer}
button[aria-pressed=true]{background:var(--ink);color:var(--card);border-color:var(--ink)}
.legend{color:var(--mute);font-size:.85rem}
.legend .bar{display:inline-block;width:22px;height:8px;vertical-align:middle;position:static}
.units{list-style:none;margin:0;padding:0}
.unit,.lines>li{border-top:1px solid var(--line);padding:10px 0 10px 12px;border-left:4px solid var(--keep)}
.unit.summarize,.lines>.s{border-left-color:var(--summarize)}.unit.archive,.lines>.a{border-left-color:var(--archive)}
#units[data-show=keep] .unit:not(.keep),#units[data-show=summarize] .unit:not(.summarize),
#units[data-show=archive] .unit:not(.archive),#units[data-show=keep] .lines>li:not(.k),
#units[data-show=summarize] .lines>li:not(.s),#units[data-show=archive] .lines>li:not(.a),
#units[data-show=keep] .page:not(.has-keep),
#units[data-show=summarize] .page:not(.has-summarize),#units[data-show=archive] .page:not(.has-archive){display:none}
.page{border-top:1px solid var(--line);padding:6px 0}#units.all .page[open]{content-visibility:auto;contain-intrinsic-size:auto 4000px}
.lines>li{padding:3px 0 3px 8px;font-size:.85rem;overflow-wrap:anywhere}
.lines b{font-weight:600}.lines small{font-size:inherit;color:var(--mute)}.lines samp{font:inherit}
.lines details{display:inline;margin:0}.lines summary{display:inline;font-size:inherit}
.lines pre{background:var(--bg);border-radius:6px;padding:6px 8px}
.head{display:flex;flex-wrap:wrap;align-items:baseline;gap:10px}
.uid{font:600 13px ui-monospace,Menlo,Consolas,monospace}.span,.who{color:var(--mute);font-size:.85rem}
.who{flex:1;min-width:10em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.action{font-size:.75rem;font-weight:700;text-transform:uppercase;letter-spacing:.05em;padding:1px 8px;border-radius:4px;
color:#fff;background:var(--keep)}
.action.summarize{background:var(--summarize)}.action.archive{background:var(--archive)}
.badge{font-size:.72rem;padding:1px 7px;border-radius:999px;border:1px solid var(--mute);color:var(--mute)}
.body{display:grid;grid-template-columns:minmax(0,1fr) 340px;gap:4px 18px;align-items:center}
@media (max-width:760px){.body{grid-template-columns:1fr}}
.reason{margin:2px 0;font-size:.88rem;overflow-wrap:anywhere}
.cc{font:600 .72em ui-monospace,Menlo,Consolas,monospace;padding:0 2px;margin:0 1px;border:1px solid currentColor;
border-radius:3px;color:var(--archive);white-space:nowrap}.reason code{color:var(--mute)}
.bars{display:grid;gap:2px;margin:4px 0 0}
.bar{display:block;height:7px;border-radius:3px;min-width:1px}
.bar.before{background:var(--before)}.bar.after{background:var(--keep)}.bar.after.summarize{background:var(--summarize)}
.bar.after.archive{background:var(--archive)}
.bytes{margin:2px 0 0;font-size:.82rem;color:var(--mute);font-variant-numeric:tabular-nums}
.delta{font-weight:600;color:var(--ink)}
details{margin-top:6px}summary{cursor:pointer;color:var(--focus);font-size:.88rem}
.cols{display:grid;grid-template-columns:minmax(0,2fr) minmax(0,3fr);gap:14px;margin-top:6px}
@media (max-width:760px){.cols{grid-template-columns:1fr}}
.col{background:var(--bg);border-radius:8px;padding:8px 10px;margin-top:6px;min-width:0}
.msg{margin-bottom:6px}.role{font-size:.72rem;font-weight:700;text-transform:uppercase;color:var(--mute)}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:12.5px/1.45 ui-monospace,Menlo,Consolas,monospace}
pre.call{color:var(--keep)}.cut{display:block;margin:4px 0;padding:2px 6px;font-style:italic;color:var(--mute);
border:1px dashed var(--line);border-radius:4px}
.scroll{overflow-x:auto}table{border-collapse:collapse;width:100%;font-size:.85rem;margin-top:8px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
tr.bad td{background:rgba(211,51,51,.08)}
.gloss{display:grid;grid-template-columns:max-content 1fr;gap:6px 16px;margin:0}.gloss dd{margin:0}
"""

_JS = """
(function(){
  var section=document.getElementById('units'), filters=document.querySelectorAll('[data-filter]'), want='all';
  filters.forEach(function(b){b.addEventListener('click',function(){
    want=b.getAttribute('data-filter');
    filters.forEach(function(o){o.setAttribute('aria-pressed',String(o===b));});
    section.setAttribute('data-show',want);
  });});
  function all(open){var only=want==='all'?'':'.'+want, has=want==='all'?'':'.has-'+want;
    section.classList.toggle('all',open);
    section.querySelectorAll('details.page'+has+', li.unit'+only+' details').forEach(function(d){d.open=open;});}
  window.addEventListener('hashchange',function(){
    var t=document.getElementById(location.hash.slice(1));
    if(t&&section.contains(t)){t.scrollIntoView();requestAnimationFrame(function(){t.scrollIntoView();});}});
  var expand=document.getElementById('expand-all'), collapse=document.getElementById('collapse-all');
  if(expand){expand.addEventListener('click',function(){all(true);});}
  if(collapse){collapse.addEventListener('click',function(){all(false);});}
})();
"""

POLICY = ("default-src 'none'; style-src 'unsafe-inline'; "
          f"script-src 'sha256-{base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()}'; "
          "base-uri 'none'; form-action 'none'")
"""The page's Content Security Policy: its own script (by its hash) and inline styles, nothing else, nothing fetched.
Untrusted text is escaped (:func:`_text`); the policy is the second wall should a change ever let markup through: no
other script would run and no image, style sheet or font would load (docs/report.md)."""
