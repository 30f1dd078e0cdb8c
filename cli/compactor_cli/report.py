"""The human report of ``compactor compact``: live progress while model calls run, then a fragment table."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, TextIO

from compactor.jsonutil import dense_size
from compactor.provider_failures import failure_causes, fallback_count


class Progress:
    """Counts model nodes as they finish; one rewritten line on a terminal, sparse lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.total = 0
        self.done = 0
        self.failed = 0

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "plan":
            self.total = 2 * int(event.get("batches", 0))
            self._write(f"{event.get('candidates', 0)} candidate fragments in {event.get('batches', 0)} batches")
            return
        if event.get("kind") not in ("llm", "decision") or event.get("event") != "node_finished":
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


class WindowProgress:
    """One line per pass, rewritten per window on a terminal (windowed compaction of large files)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
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


def render_windowed_report(summary: dict[str, Any], seconds: float) -> str:
    """The report of a windowed run (no per-fragment table: units change between passes)."""
    compaction = summary["compaction"]
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
    usage = summary.get("usage") or {}
    lines.append(f"tokens: {usage.get('prompt_tokens', 0)} in, {usage.get('completion_tokens', 0)} out")
    lines.append(f"time: {seconds:.2f}s")
    return "\n".join(lines) + "\n"


def _roles(messages: list[dict[str, Any]]) -> str:
    roles: list[str] = []
    for message in messages:
        role = str(message.get("role"))
        if message.get("tool_calls"):
            role += f"[{len(message['tool_calls'])} call{'s' if len(message['tool_calls']) > 1 else ''}]"
        roles.append(role)
    text = ",".join(roles)
    return text if len(text) <= 28 else text[:27] + "…"


def render_report(request: Any, body: dict[str, Any], seconds: float) -> str:
    if "windows" in (body.get("compaction") or {}):
        return render_windowed_report(body, seconds)
    messages = request.messages
    output = body["messages"]
    lines: list[str] = []
    compaction = body.get("compaction")
    if compaction is not None:
        lines.append(f"{'fragment':<16} {'messages':>9}  {'roles':<28} {'action':<9} {'bytes':>8} {'after':>8}")
        cursor = 0
        for entry in compaction["fragments"]:
            original = messages[entry["start"]:entry["end"]]
            action = entry["action"]
            count = {"keep": len(original), "summarize": 1, "archive": 0}[action]
            after = dense_size(output[cursor:cursor + count]) - 2 * (count > 0) if count else 0
            before = dense_size(original) - 2
            cursor += count
            span = f"{entry['start']}-{entry['end'] - 1}" if entry["end"] - entry["start"] > 1 else str(entry["start"])
            lines.append(f"{entry['id']:<16} {span:>9}  {_roles(original):<28} {action:<9} {before:>8} {after:>8}")
        actions = [e["action"] for e in compaction["fragments"]]
        lines.append("")
        lines.append(f"units: {len(actions)}  keep {actions.count('keep')}  summarize {actions.count('summarize')}"
                     f"  archive {actions.count('archive')}")
        lines.append(f"bytes: {compaction['original_bytes']} -> {compaction['output_bytes']}"
                     f" ({_pct(compaction['output_bytes'], compaction['original_bytes'])} of original);"
                     f" target {compaction['target_bytes']} ({compaction['target_ratio']:g})"
                     f" {'met' if compaction['target_met'] else 'not met'}")
        if compaction["reasons"]:
            counts = Counter(compaction["reasons"])
            lines.append("reasons: " + ", ".join(f"{r} x{n}" if n > 1 else r for r, n in counts.items()))
            if counts.get("fragment_or_decision_context_limit") and not body.get("x_router"):
                lines.append("hint: some units did not fit a 32 000-byte decision payload; pin fewer messages "
                             "with --pin or --pin-task")
        limits = compaction.get("limits")
        if limits:
            lines.append(f"made of: pins {limits['pins_bytes']}, tail {limits['tail_bytes']}, kept units "
                         f"{limits['kept_units_bytes']}, summaries {limits['summaries_bytes']} bytes;"
                         f" most from {limits['limited_by']}; smallest reachable ratio {limits['smallest_ratio']:g}"
                         " (every candidate archived)")
        lines.append(f"first changed message: {compaction.get('first_changed_index')}"
                     f"  (preserved prefix {compaction.get('preserved_prefix_bytes')} bytes)")
    else:
        before, after = dense_size(messages), dense_size(output)
        lines.append(f"legacy seal: {'compacted' if body['compacted'] else 'unchanged'};"
                     f" messages {len(messages)} -> {len(output)}; bytes {before} -> {after}"
                     f" ({_pct(after, before)})")
    x_router = body.get("x_router")
    if x_router is not None:
        cost = x_router.get("cost_usd")
        lines.append(f"cost: {'unknown' if cost is None else f'${cost:.6f}'}"
                     f" ({x_router.get('cost_basis') or 'no basis'})")
        nodes = (x_router.get("decision_trace") or {}).get("flow_nodes") or []
        fallbacks = sum(1 for n in nodes if n.get("fallback") or n.get("error"))
        if nodes:
            lines.append(f"flow nodes: {len(nodes)}, fallbacks/errors: {fallbacks}")
            served = Counter(f"{n.get('served_model_id')} ({n['kind']})" for n in nodes
                             if n.get("kind") in ("llm", "decision") and n.get("served_model_id"))
            if served:
                lines.append("models: " + ", ".join(f"{name} x{count}" for name, count in sorted(served.items())))
    else:
        lines.append("cost: none (no model call)")
    lines.extend(problem_lines(body))
    lines.append(f"time: {seconds:.2f}s")
    return "\n".join(lines) + "\n"


def base_url_of(offer_id: str) -> str | None:
    from compactor.catalog import CatalogError, get_catalog

    try:
        offer = get_catalog().offer(offer_id)
    except CatalogError:
        return None
    return offer.base_url if offer is not None else None


def problem_lines(body: dict[str, Any]) -> list[str]:
    """The fallbacks and failed calls grouped by cause, in plain words with the offer and the fix."""
    causes = failure_causes(body, base_url_of)
    if not causes:
        return []
    fallbacks = fallback_count(body)
    lines = [f"problems: {fallbacks} model call{'s' if fallbacks != 1 else ''} fell back"]
    for cause, count in causes:
        lines.append(f"  {cause.cause} (offer {cause.offer}, x{count})")
        lines.append(f"    fix: {cause.fix}")
    return lines


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"
