"""The quality harness behind ``compactor eval``: evidence kept per byte, for every method.

The metric (docs/evaluation.md) is computed from the input transcript and a method's output
messages only: it never reads the manifest, the report or any other internals of the compactor,
and its text extraction is its own (it does not reuse the built-in offers' heuristics, which it
grades).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from compactor.jsonutil import dense_size

Message = dict[str, Any]

# ---------------------------------------------------------------------------------------------
# Searchable text of messages


_WHITESPACE = re.compile(r"\s+")


def squeeze(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _strings(value: Any) -> list[str]:
    """Every string leaf of a JSON value (tool call arguments), in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [] if value is None else [json.dumps(value)]


def _arguments(call: Any) -> tuple[str, Any]:
    function = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
    name = function.get("name") if isinstance(function.get("name"), str) else ""
    raw = function.get("arguments")
    if isinstance(raw, str):
        try:
            return name, json.loads(raw)
        except ValueError:
            return name, raw
    return name, raw


def message_text(message: Any) -> str:
    """What a reader of ``message`` sees: its content text, then its tool calls' names and argument values."""
    if not isinstance(message, dict):
        return json.dumps(message)
    content = message.get("content")
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif part is not None:
                parts.extend(_strings(part))
    elif content is not None:
        parts.extend(_strings(content))
    for call in message.get("tool_calls") or []:
        name, arguments = _arguments(call)
        parts.append(name)
        parts.extend(_strings(arguments))
    return "\n".join(parts)


def haystack(messages: list[Message]) -> str:
    """The whitespace-squeezed text of a whole transcript: where evidence is looked for."""
    return squeeze("\n".join(message_text(m) for m in messages))


# ---------------------------------------------------------------------------------------------
# Which input messages a method changed


def changed_indexes(original: list[Message], output: list[Message]) -> list[int]:
    """Indexes of input messages that do not come back verbatim, in order, in ``output``."""
    keys = [json.dumps(m, sort_keys=True) for m in output]
    changed: list[int] = []
    cursor = 0
    for index, message in enumerate(original):
        key = json.dumps(message, sort_keys=True)
        try:
            found = keys.index(key, cursor)
        except ValueError:
            changed.append(index)
            continue
        cursor = found + 1
    return changed


# ---------------------------------------------------------------------------------------------
# Evidence items

_PATH = re.compile(
    r"(?<![\w/.~-])(?:~|\.{1,2})?/?(?:[\w@+-][\w.@+-]*/)+[\w@+-][\w.@+-]*"  # a/b, /a/b, ./a, ~/a
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|sh|toml|ya?ml|json"
    r"|cfg|ini|md|rst|txt|xml|html|css|sql|lock|gradle|swift|cs|scala)\b"
)
_IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\b")
_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|^\s*(?:E\s+)?(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b:"
    r"|^\s*(?:error|ERROR|Error|fatal|FATAL|panic)\b\s*(?:\[\w+\])?\s*[:!]"
    r"|\S+:\d+(?::\d+)?:\s*(?:error|fatal)\b|\bFAILED\b|^FAIL\b|\b\d+ failed\b"
    r"|command not found|No such file or directory|Permission denied|Segmentation fault",
    re.MULTILINE,
)
_EXIT_CODE = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>|(?:exit(?:ed)?(?: with)?(?: code| status)?|exit_code\"?)\s*[:=]?\s*(-?\d+)",
    re.IGNORECASE,
)
_FENCE = re.compile(r"```[\w-]*[ \t]*\n(.*?)```", re.DOTALL)
_HEREDOC_WRITE = re.compile(
    r"cat\s+(?:>\s*(?P<p1>[^\s<>|;&]+)\s*<<-?\s*['\"]?(?P<t1>\w+)['\"]?"
    r"|<<-?\s*['\"]?(?P<t2>\w+)['\"]?\s*>\s*(?P<p2>[^\s<>|;&]+))[^\n]*\n"
)
_WRITE_KEYS = (("file_text", "path"), ("content", "file_path"), ("content", "path"), ("contents", "path"))
ERROR_PROBE = 120
COMMAND_PROBE = 80
EXIT_WINDOW = 400
MIN_IDENTIFIER = 4


# The metric's own rules (docs/evaluation.md), deliberately not shared with the compactor's salience code:
# the metric must not move when the compactor's notion of a name changes.
_DOTTED_OR_SNAKE = re.compile(r"\.|[A-Za-z0-9]_+[A-Za-z0-9]")
_INNER_CAPITAL = re.compile(r"^_*[A-Za-z0-9]+[A-Z]")
_LETTER, _LOWER = re.compile(r"[A-Za-z]"), re.compile(r"[a-z]")


def is_identifier_like(token: str) -> bool:
    """Code-ish names: snake_case, camelCase/PascalCase with an inner capital, or dotted names."""
    if len(token) < MIN_IDENTIFIER or token.isdigit():
        return False
    if _DOTTED_OR_SNAKE.search(token):
        return "." in token or _LETTER.search(token) is not None
    return _INNER_CAPITAL.match(token) is not None and _LOWER.search(token) is not None


def identifiers(text: str) -> set[str]:
    return {t for t in _IDENTIFIER.findall(text) if is_identifier_like(t) and not _PATH.fullmatch(t)}


@dataclass(frozen=True)
class Item:
    kind: str  # path | error | command | identifier | file
    probe: str  # squeezed text looked for in the output
    exit_code: int | None = None
    source: int | None = field(default=None, compare=False)  # the input message it was found in (a diagnostic)

    def kept(self, hay: str) -> bool:
        if self.kind != "command":
            return self.probe in hay
        return _command_kept(self.probe, self.exit_code, hay)


def _command_kept(probe: str, code: int | None, hay: str) -> bool:
    start = hay.find(probe)
    while start >= 0:
        window = hay[start + len(probe):start + len(probe) + EXIT_WINDOW]
        if any(int(a or b) == code for a, b in _EXIT_CODE.findall(window)):
            return True
        start = hay.find(probe, start + 1)
    return False


def _commands(message: Message) -> list[tuple[str | None, str]]:
    """``(tool call id, command)`` of an assistant message: shell arguments of tool calls, fenced blocks."""
    if message.get("role") != "assistant":
        return []
    found: list[tuple[str | None, str]] = []
    for call in message.get("tool_calls") or []:
        _, arguments = _arguments(call)
        if isinstance(arguments, dict):
            for key in ("command", "cmd"):
                value = arguments.get(key)
                if isinstance(value, list):
                    value = " ".join(map(str, value))
                if isinstance(value, str) and value.strip():
                    found.append((call.get("id") if isinstance(call, dict) else None, value))
                    break
    if not found and isinstance(message.get("content"), str):
        found.extend((None, body) for body in _FENCE.findall(message["content"]) if body.strip())
    return found


def _exit_code(text: str) -> int | None:
    match = _EXIT_CODE.search(text[:2000])
    return int(match.group(1) or match.group(2)) if match else None


def _observations(messages: list[Message], index: int) -> list[tuple[int, Message]]:
    """The messages answering assistant message ``index``: its tool results, else the next user message."""
    out: list[tuple[int, Message]] = []
    j = index + 1
    while j < len(messages) and messages[j].get("role") == "tool":
        out.append((j, messages[j]))
        j += 1
    if not out and j < len(messages) and messages[j].get("role") == "user":
        out.append((j, messages[j]))
    return out


def _writes(message: Message) -> list[tuple[str, str]]:
    """``(path, full content)`` of each whole-file write in an assistant message."""
    if message.get("role") != "assistant":
        return []
    writes: list[tuple[str, str]] = []
    for call in message.get("tool_calls") or []:
        _, arguments = _arguments(call)
        if isinstance(arguments, dict):
            for body_key, path_key in _WRITE_KEYS:
                body, path = arguments.get(body_key), arguments.get(path_key)
                if isinstance(body, str) and isinstance(path, str):
                    writes.append((path, body))
                    break
    for _, command in _commands(message):
        for match in _HEREDOC_WRITE.finditer(command):
            tag = match.group("t1") or match.group("t2")
            end = re.compile(r"^[ \t]*" + re.escape(tag) + r"[ \t]*$", re.MULTILINE).search(command, match.end())
            if end is not None:
                writes.append((match.group("p1") or match.group("p2"), command[match.end():end.start()]))
    return writes


@dataclass
class EvidenceSet:
    items: list[Item] = field(default_factory=list)

    def score(self, output: list[Message]) -> tuple[float, int, dict[str, list[int]]]:
        """``(fraction kept, item count, {kind: [kept, total]})``; no items means nothing was lost (1.0)."""
        hay = haystack(output)
        by_kind: dict[str, list[int]] = {}
        kept = 0
        for item in self.items:
            ok = item.kept(hay)
            kept += ok
            counts = by_kind.setdefault(item.kind, [0, 0])
            counts[0] += ok
            counts[1] += 1
        total = len(self.items)
        return (kept / total if total else 1.0), total, by_kind

    def lost(self, output: list[Message]) -> list[Item]:
        """The items not findable in ``output``, in the order they were collected (``compactor eval --lost``)."""
        hay = haystack(output)
        return [item for item in self.items if not item.kept(hay)]


def evidence(messages: list[Message], changed: list[int]) -> EvidenceSet:
    """The evidence items of the ``changed`` messages of ``messages`` (see docs/evaluation.md)."""
    changed_set = set(changed)
    texts = [message_text(m) for m in messages]
    # identifiers used again later: the union of every later message's identifiers
    later_ids: list[set[str]] = [set() for _ in messages]
    running: set[str] = set()
    for index in range(len(messages) - 1, -1, -1):
        later_ids[index] = set(running)
        running |= identifiers(texts[index])
    # a path is used again later when it occurs after the end of its message in the joined text
    joined = "\n".join(texts)
    ends: list[int] = []
    offset = 0
    for text in texts:
        offset += len(text)
        ends.append(offset)
        offset += 1
    seen: dict[tuple[str, str], Item] = {}

    def add(item: Item) -> None:
        if item.probe:
            seen.setdefault((item.kind, item.probe + f"#{item.exit_code}"), item)

    # the final content of each written path, when that final write is in a changed message
    final_write: dict[str, tuple[int, str]] = {}
    for index, message in enumerate(messages):
        for path, body in _writes(message):
            final_write[path] = (index, body)
    for path, (index, body) in final_write.items():
        if index in changed_set and body.strip():
            add(Item("file", squeeze(body), source=index))
    for index in changed:
        message, text = messages[index], texts[index]
        role = message.get("role")
        for raw in _PATH.findall(text):
            path = raw.rstrip(".")
            if len(path) >= 3 and "//" not in path and (role == "assistant" or joined.rfind(path) >= ends[index]):
                add(Item("path", path, source=index))
        if role != "assistant":
            for line in text.splitlines():
                if _ERROR_LINE.search(line) and squeeze(line):
                    add(Item("error", squeeze(line)[:ERROR_PROBE], source=index))
        for token in identifiers(text) & later_ids[index]:
            add(Item("identifier", token, source=index))
    # commands with their exit codes: either the call or its observation changed
    for index, message in enumerate(messages):
        commands = _commands(message)
        if not commands:
            continue
        answers = _observations(messages, index)
        for call_id, command in commands:
            obs = [(j, m) for j, m in answers if call_id is None or m.get("tool_call_id") in (None, call_id)]
            if not obs:
                continue
            code = _exit_code(texts[obs[0][0]])
            touched = index in changed_set or any(j in changed_set for j, _ in obs)
            if code is not None and touched:
                add(Item("command", squeeze(command)[:COMMAND_PROBE], code, source=index))
    return EvidenceSet(list(seen.values()))


# ---------------------------------------------------------------------------------------------
# The trim baseline


def pinned_head(messages: list[Message]) -> int:
    """Length of the head trim never drops: leading system/developer messages and the first user message."""
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            return index + 1
        if message.get("role") not in ("system", "developer"):
            return index
    return len(messages)


def trim(messages: list[Message], target_bytes: int) -> list[Message]:
    """Drop the oldest messages after the pinned head (a tool call with its results as one) until the
    output is at most ``target_bytes``, or only the head and the last message are left."""
    head = pinned_head(messages)
    body = messages[head:]
    units: list[list[Message]] = []
    for message in body:
        if message.get("role") == "tool" and units and (units[-1][0].get("tool_calls")):
            units[-1].append(message)
        else:
            units.append([message])
    size = dense_size(messages)
    start = 0
    while size > target_bytes and start < len(units) - 1:
        size -= sum(dense_size(m) + 1 for m in units[start])
        start += 1
    return messages[:head] + [m for unit in units[start:] for m in unit]


# ---------------------------------------------------------------------------------------------
# Running methods


@dataclass
class Row:
    transcript: str
    method: str
    input_bytes: int
    output_bytes: int
    kept: float
    items: int
    model_calls: int
    cost_usd: float | None
    by_kind: dict[str, list[int]]
    note: str = ""
    lost: list[Item] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.output_bytes / self.input_bytes if self.input_bytes else 1.0

    def as_json(self) -> dict[str, Any]:
        return {"transcript": self.transcript, "method": self.method, "input_bytes": self.input_bytes,
                "output_bytes": self.output_bytes, "ratio": round(self.ratio, 4), "evidence_kept": round(self.kept, 4),
                "evidence_items": self.items, "model_calls": self.model_calls, "cost_usd": self.cost_usd,
                "evidence_by_kind": self.by_kind, "note": self.note,
                "lost": [{"kind": i.kind, "text": i.probe, "exit_code": i.exit_code, "message": i.source}
                         for i in self.lost]}


def mode_names() -> list[str]:
    """The compaction modes the service registers."""
    from compactor.compaction.modes import names

    return list(names())


def request_body(mode: str, messages: list[Message], settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``/v1/compact`` body for ``mode``: default settings unless ``settings`` (decision mode's) say
    otherwise; decision mode uses the preset's own decision policy, as a request naming none does."""
    body: dict[str, Any] = {"messages": messages, "mode": mode}
    if mode == "decision":
        body.update(settings or {})
    return body


async def run_mode(mode: str, messages: list[Message], settings: dict[str, Any] | None = None
                   ) -> tuple[list[Message], int, float | None, str]:
    from compactor.models import CompactRequest
    from compactor.service import compact_call, request_deadline

    request = CompactRequest.model_validate(request_body(mode, messages, settings))
    record = await compact_call(request, deadline=request_deadline())
    if not record.ok:
        return messages, 0, None, f"HTTP {record.status}: {record.body.get('error', {}).get('message')}"
    return record.body["messages"], record.model_calls, record.cost_usd, fallback_note(record)


def fallback_note(record: Any) -> str:
    """What a row must say when model calls fell back: its figures then measure the originals kept, not the
    models (a catalog whose key is unset or whose server is down); the most frequent cause in plain words."""
    from compactor.provider_failures import failure_causes, fallback_count
    from compactor_cli.report import base_url_of

    fell_back = fallback_count(record.nodes)
    if not fell_back:
        return ""
    causes = failure_causes(record.nodes, base_url_of)
    cause = f": {causes[0][0].cause} (offer {causes[0][0].offer})" if causes else ""
    return f"{fell_back} model call{'s' if fell_back != 1 else ''} fell back{cause}"


def score(name: str, method: str, messages: list[Message], output: list[Message], calls: int,
          cost: float | None, note: str = "") -> Row:
    found = evidence(messages, changed_indexes(messages, output))
    kept, items, by_kind = found.score(output)
    return Row(name, method, dense_size(messages), dense_size(output), kept, items, calls, cost, by_kind, note,
               found.lost(output))


async def evaluate(name: str, messages: list[Message], modes: list[str],
                   settings: dict[str, Any] | None = None) -> list[Row]:
    """One row per mode plus ``trim`` at decision mode's output bytes (when decision is among the modes)."""
    rows: list[Row] = []
    for mode in modes:
        output, calls, cost, note = await run_mode(mode, messages, settings)
        rows.append(score(name, mode, messages, output, calls, cost, note))
        if mode == "decision":
            trimmed = trim(messages, rows[-1].output_bytes)
            rows.append(score(name, "trim", messages, trimmed, 0, 0.0, "at decision's bytes"))
    return rows


# ---------------------------------------------------------------------------------------------
# Tables


def means(rows: list[Row]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for method in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == method]
        out[method] = {"ratio": sum(r.ratio for r in mine) / len(mine),
                       "evidence_kept": sum(r.kept for r in mine) / len(mine),
                       "evidence_items": sum(r.items for r in mine) / len(mine),
                       "model_calls": sum(r.model_calls for r in mine) / len(mine),
                       "transcripts": len(mine)}
    return out


def _cost(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


LOST_TEXT = 100


def render_lost(rows: list[Row], methods: list[str]) -> str:
    """The evidence items each row of ``methods`` lost, per transcript: kind, the input message it was found in
    and its text (cut to LOST_TEXT characters); what ``compactor eval --lost`` adds to the table."""
    lines: list[str] = []
    for row in rows:
        if row.method not in methods:
            continue
        lines.append(f"{row.transcript}  {row.method}: {len(row.lost)} of {row.items} items lost")
        for item in row.lost:
            code = "" if item.exit_code is None else f" (exit {item.exit_code})"
            text = item.probe if len(item.probe) <= LOST_TEXT else item.probe[:LOST_TEXT - 1] + "…"
            lines.append(f"  {item.kind:<10} message {item.source!s:>4}  {text!r}{code}")
    return "\n".join(lines) + ("\n" if lines else "")


def render(rows: list[Row]) -> str:
    width = max([len("transcript")] + [len(r.transcript) for r in rows])
    header = f"{'transcript':<{width}}  {'method':<9} {'bytes':>7} {'kept':>7} {'items':>6} {'calls':>6} {'cost':>9}"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(f"{row.transcript:<{width}}  {row.method:<9} {100 * row.ratio:6.1f}% {100 * row.kept:6.1f}%"
                     f" {row.items:>6} {row.model_calls:>6} {_cost(row.cost_usd):>9}"
                     + (f"  {row.note}" if row.note and row.method not in ("trim", "mask") else ""))
    lines.append("")
    lines.append(f"mean over {len({r.transcript for r in rows})} transcripts")
    for method, m in means(rows).items():
        cost = [r.cost_usd for r in rows if r.method == method]
        total = None if any(c is None for c in cost) else sum(cost)  # type: ignore[arg-type]
        lines.append(f"  {method:<9} bytes {100 * m['ratio']:5.1f}%  evidence kept {100 * m['evidence_kept']:5.1f}%"
                     f"  items {m['evidence_items']:7.1f}  calls {m['model_calls']:5.1f}  cost {_cost(total)}")
    table = means(rows)
    if "decision" in table and "trim" in table:
        gap = 100 * (table["decision"]["evidence_kept"] - table["trim"]["evidence_kept"])
        lines.append(f"  decision keeps {gap:+.1f} points of evidence over trim at the same bytes")
    return "\n".join(lines) + "\n"
