"""The built-in extractive summarizer: no model, only selection and elision of the input's own text.

JSON mode (the compaction preset's summary node): the user message maps ids to item texts (usually
the compact JSON of a tool call with its results, or of one message). Each item becomes its most
salient lines in their original order: the call with its exit code (``$ command → exit N``), error
lines, results of edits, lines naming what later messages use (the request's ``keep_names``, which
the prompt also lists for models), paths, the agent's own sentences, the ends of outputs. The
batch's byte total is spent across the items by salience; each summary stays within the per-summary
budget. Lines are cut with ``…``; nothing is paraphrased or invented (docs/offline-offers.md).

Plain mode (legacy seal): the rendered conversation (``<role>: <content>`` lines) becomes a digest
of the task, the latest assistant statement, errors, commands with their exit codes, files and
sentences that announce decisions or next steps, within ``max_tokens × 4`` bytes.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_right
from itertools import accumulate
from typing import Any

from compactor.chat import RESULT_ROLES, as_messages, audio_transcript
from compactor.formats.base import PAYLOAD_MARKER, media_marker
from compactor.jsonutil import dense_dumps, dense_size, loads_within, strict_loads
from compactor.markers import SEAL_HEAD as _SEAL_HEAD
from compactor.markers import omitted_marker_pattern
from compactor.markers import tool_call_pattern
from compactor.offline.text_fit import (
    Section, fit_end, fit_sections, squeeze, squeezed_window, utf8_len,
)
from compactor.offline.transcript_reading import (
    Action, content_text, error_lines, error_windows, fenced_commands, is_observation, message_actions, paths_in,
    prose_text, return_codes, strip_output_tags, tool_call_action,
)
from compactor.patterns import lazy, pattern

SUMMARIZER_MODEL = "builtin-extractive-summarizer"
DEFAULT_ITEM_BUDGET = 256
DEFAULT_SEAL_MAX_TOKENS = 512
BYTES_PER_TOKEN = 4
# Compiled on first use by ``re``'s cache, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_ROLE_PREFIX = r"(?m)^(system|developer|user|assistant|tool|function|exit): "
_SENTENCE_END = pattern(r"(?<=[.!?])\s+")
_decision_words = lazy(  # compiled on first use, as _ROLE_PREFIX
    r"\b(?:I'll|I will|we will|let me|decided?|need to|should|must|plan|next|todo|fix(?:ed|es)?"
    r"|root cause|the (?:issue|problem|bug) is|remaining|not yet|still)\b",
    re.IGNORECASE,
)
# Each command, error line or decision sentence of a seal digest is cut to this many bytes.
_SEAL_ENTRY_BYTES = 200
_MAX_PATHS = 24


_EXIT_PHRASE = pattern(r"(?:Process exited with code|exit(?:ed)? (?:code|status)|Exit code:?)\s*(-?\d+)",
                        re.IGNORECASE)
_EDIT_RESULT = pattern(
    r"\b(?:created|edited|updated|wrote|written|modified|applied|replaced|deleted|saved|renamed)\b", re.IGNORECASE)
_name_token = lazy(r"[A-Za-z_~./][\w./~@+-]*")  # as _decision_words
# Salience of a summary line (docs/offline-offers.md): the call and its exit code first, then errors,
# edit results, lines naming what later messages use, paths, the agent's reasoning, the ends of outputs.
SCORE_CALL, SCORE_ERROR, SCORE_EDIT, SCORE_NAMED, SCORE_PATH, SCORE_NOTE, SCORE_END = 10, 9, 7, 5, 4, 3, 2
SCORE_MEDIA = SCORE_EDIT  # an image, a file or audio in a message or a result: what the call showed or gave
LINE_BYTES = 240
# How a summary says that its item showed only the head and tail of a long output (markers.OMITTED_MARKER: a unit
# too big for a summary record, docs/offline-offers.md "Units too big for one record").
PARTIAL_VIEW = "[partial view: {omitted} bytes of this output were not read]"
_MIN_CUT = 40  # a cut call or error line shorter than this says too little
_CALL_BYTES = 200
_ARGUMENT_BYTES = 80  # a call's argument longer than this is shown cut; its lines are judged one by one


class _Line:
    __slots__ = ("text", "score", "order", "size", "names", "paths")

    def __init__(self, text: str, score: float, order: int, names: frozenset[str] = frozenset(),
                 paths: frozenset[str] = frozenset()) -> None:
        self.text = text
        self.score = score
        self.order = order
        self.size = utf8_len(text) + 1
        self.names = names  # the names used later that the line carries
        self.paths = paths

    def retext(self, text: str) -> None:
        self.text = text
        self.size = utf8_len(text) + 1


def _names_of(text: str, names: frozenset[str]) -> frozenset[str]:
    if not names:
        return frozenset()
    return frozenset(token.strip(".") for token in _name_token().findall(text) if token.strip(".") in names)


def _exit_codes(text: str) -> list[int]:
    codes = return_codes(text)
    if codes:
        return codes
    return [int(code) for code in _EXIT_PHRASE.findall(text[:4000])]


def _call_line(description: str, code: int | None) -> str:
    """``$ command`` (whitespace squeezed, so a multi-line script shows its start) cut to ``_CALL_BYTES``,
    with its line count when it has several lines and ``→ exit N`` once the exit code is known."""
    lines = description.count("\n") + 1
    suffix = f" ({lines} lines)" if lines > 1 else ""
    text = squeeze(description)
    line = fit_end(text, _CALL_BYTES - utf8_len(suffix)) + suffix if utf8_len(text) > _CALL_BYTES or suffix \
        else text
    return line + (f" → exit {code}" if code is not None else "")


def _short_value(value: Any) -> str:
    text = value if isinstance(value, str) else dense_dumps(value)
    return fit_end(squeeze(text.split("\n", 1)[0]), _ARGUMENT_BYTES) + (" …" if "\n" in text.strip() else "")


def _action_lines(action: Action) -> tuple[str, list[str]]:
    """The call's one-line description and the long texts it carries (a script's body, a file's new
    content), whose lines are judged like output lines."""
    if action.command is not None:
        return action.describe(), action.command.split("\n")[1:]
    if not isinstance(action.arguments, dict):
        return action.describe(), []
    bodies = [value for value in action.arguments.values()
              if isinstance(value, str) and (len(value) > _ARGUMENT_BYTES or "\n" in value.strip())]
    inner = ", ".join(f"{key}={_short_value(value)}" for key, value in action.arguments.items())
    return f"{action.tool}({inner})", [line for body in bodies for line in body.split("\n")]


def _error_positions(raw: list[str]) -> set[int]:
    """Positions of the error lines among ``raw`` (lines without a newline): a line ``error_windows`` gives
    whole, or one it cut to the text around its error keyword because it is long (a chained traceback's last
    exception, whose message quotes a long value, is the line that matters most). A cut is given to the line
    it was cut from, by its offset: looking for every cut in every line took time quadratic in the lines."""
    windows = list(error_windows("\n".join(raw)))
    if not windows:
        return set()
    stripped = [line.strip() for line in raw]
    whole = set(stripped)
    found = {text for _, text in windows}
    starts = list(accumulate((len(line) + 1 for line in raw), initial=0))
    return ({position for position, line in enumerate(stripped) if line in found}
            | {bisect_right(starts, offset) - 1 for offset, text in windows if text not in whole})


def _text_lines(text: str | list[str], names: frozenset[str], order: int, lines: list[_Line],
                seen: set[str], body: bool = False) -> int:
    """Score every line of an observation, a plain text or (``body``) the long argument of a call;
    returns the next order number. ``seen`` holds the squeezed lines already taken."""
    raw = [line for line in (text.splitlines() if isinstance(text, str) else text) if line.strip()]
    errors = set() if body else _error_positions(raw)
    partial: list[_Line] = []
    for position, line in enumerate(raw):
        squeezed = squeeze(line)
        if squeezed in seen:
            continue
        seen.add(squeezed)
        if "bytes omitted" in squeezed and omitted_marker_pattern().fullmatch(squeezed):
            # the view showed only parts of a long output (its ends, lines of its middle): the summary says so,
            # once, with all the bytes it did not read
            if not partial:
                partial.append(_Line(PARTIAL_VIEW.format(omitted=sum(
                    int(m.group(1)) for line in raw if "bytes omitted" in line
                    for m in [omitted_marker_pattern().fullmatch(squeeze(line))] if m)), SCORE_CALL, order))
                lines.append(partial[0])
                order += 1
            continue
        shown = fit_end(squeezed, LINE_BYTES)
        found, line_paths = _names_of(shown, names), frozenset(paths_in(shown))
        if position in errors:
            score = SCORE_ERROR
        elif not body and _EDIT_RESULT.search(squeezed) and line_paths:
            score = SCORE_EDIT
        elif found:
            score = SCORE_NAMED
        elif line_paths:
            score = SCORE_PATH
        elif not body and position in (0, len(raw) - 1):
            score = SCORE_END
        else:
            continue
        lines.append(_Line(shown, score, order, found, line_paths))
        order += 1
    return order


def _message_lines(messages: list[dict[str, Any]], names: frozenset[str]) -> list[_Line]:
    lines: list[_Line] = []
    order = 0
    seen: set[str] = set()
    pending: list[tuple[_Line, str, Any]] = []  # call lines still waiting for their exit code, with their call ids
    for message in messages:
        actions = message_actions(message)
        # An assistant's audio reply: its transcript is what it said, read as its text (its content is null)
        said = audio_transcript(message)
        if actions:
            ids = _call_ids(message, len(actions))
            prose = prose_text(message)
            for sentence in _SENTENCE_END.split(squeeze(f"{prose} {said}" if said else prose)):
                if sentence:
                    shown = fit_end(sentence, LINE_BYTES)
                    score = SCORE_NOTE + (0.5 if _decision_words().search(sentence) else 0)
                    lines.append(_Line(shown, score, order, _names_of(shown, names), frozenset(paths_in(shown))))
                    order += 1
            if said is not None:
                lines.append(_Line(_audio_marker(message), SCORE_MEDIA, order))
                order += 1
            for action in actions:
                description, body = _action_lines(action)
                line = _Line(_call_line(description, None), SCORE_CALL, order)
                line.names, line.paths = _names_of(line.text, names), frozenset(paths_in(line.text))
                seen.add(squeeze(description.split("\n", 1)[0]))
                lines.append(line)
                pending.append((line, description, ids.pop(0)))
                order = _text_lines(body, names, order + 1, lines, seen, body=True)
            continue
        content = message.get("content")
        text = "" if isinstance(content, dict) and media_marker(content) else content_text(content)
        if is_observation(message):
            codes = _exit_codes(text)
            # a result names its call (tool_call_id): a call still running, whose result states no exit code,
            # must not pass the next result's exit code to the wrong call; without ids, results answer in order
            answered = message.get("tool_call_id")
            match = next((k for k, entry in enumerate(pending) if answered is not None and entry[2] == answered), None)
            if match is not None:
                line, description, _ = pending.pop(match)
                if codes:
                    line.retext(_call_line(description, codes[0]))
            elif codes and pending and (answered is None or pending[0][2] is None):
                line, description, _ = pending.pop(0)
                line.retext(_call_line(description, codes[0]))
            elif codes:  # the observation of a call in another item: its exit code leads
                lines.append(_Line(f"exit {codes[0]}", SCORE_CALL, order))
                order += 1
            text = strip_output_tags(text)
        if said:
            text = f"{text}\n{said}" if text else said
        order = _text_lines(text, names, order, lines, seen)
        markers = _media_markers(content)
        if said is not None:
            markers.append(_audio_marker(message))
        for marker in markers:  # after the message's text, as a result's image follows its text
            lines.append(_Line(marker, SCORE_MEDIA, order))
            order += 1
    return lines


def _audio_marker(message: dict[str, Any]) -> str:
    """How a summary says a message held an audio reply: its ``data`` as the view shows it (``[audio, 60000 bytes]``),
    else ``[audio]`` (a reply sent back by its ``id``)."""
    return _payload_shown(message.get("audio")) or "[audio]"


def _media_markers(content: Any) -> list[str]:
    """The images, files and audio among a message's content parts (or its one part: a computer screenshot), each as
    the view shows its base64 (``[image/png, 104857 bytes]``, docs/formats.md "Images and files"), else as seal's
    input shows the part (``[image]``, ``[file <name>]``, ``[audio]``: a URL or a file id). The text of a content
    reads only its text parts, so without these a summary never said that a screenshot had been there."""
    parts = [content] if isinstance(content, dict) else content if isinstance(content, list) else ()
    markers = []
    for part in parts:
        marker = media_marker(part) if isinstance(part, dict) else None
        if marker is not None:
            shown = _payload_shown(part)
            markers.append(marker if shown is None else shown if marker in ("[image]", "[file]", "[audio]")
                           else f"{marker[:-1]}: {shown[1:]}")  # [file spec.pdf: application/pdf, 3000 bytes]
    return markers


def _payload_shown(value: Any) -> str | None:
    """The first base64 payload marker in ``value`` (a content part, its source or its inner object)."""
    if isinstance(value, str):
        return value if PAYLOAD_MARKER.fullmatch(value) else None
    members = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((shown for member in members if (shown := _payload_shown(member)) is not None), None)


def _call_ids(message: dict[str, Any], count: int) -> list[Any]:
    """The ids of the tool calls behind ``message_actions(message)`` (``count`` of them), in order; Nones when the
    actions are not tool calls (fenced commands, a legacy ``function_call``) or do not line up with them."""
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        ids = [call.get("id") for call in calls if isinstance(call, dict) and tool_call_action(call) is not None]
        if len(ids) == count:
            return ids
    return [None] * count


def _item_lines(text: str, names: frozenset[str]) -> list[_Line]:
    try:
        messages = as_messages(loads_within(text))
    except ValueError:  # jsonutil.NestedTooDeep among them
        messages = None
    if messages:
        return _message_lines(messages, names)
    lines: list[_Line] = []
    _text_lines(text, names, 0, lines, set())
    return lines


# Phases of a summary's priority order (docs/offline-offers.md): calls with their exit codes, errors,
# edit results, then the lines naming what later messages use (each name once, most new names per byte
# first), then lines with paths not yet shown, the agent's notes, the ends of outputs.
_PHASES = 7
_CALLS, _ERRORS, _EDITS, _NAMED, _PATHS, _NOTES, _ENDS = range(_PHASES)


def _cover(pool: list[_Line], covered: set[str], key: str) -> list[_Line]:
    """Greedy cover: the lines of ``pool`` that add an uncovered name (``key``: ``names`` or ``paths``),
    the most new ones per byte first (lazy re-evaluation keeps it near-linear)."""
    heap = [(-len(getattr(line, key)) / line.size, line.order, line) for line in pool if getattr(line, key)]
    heapq.heapify(heap)
    chosen: list[_Line] = []
    while heap:
        stale, order, line = heapq.heappop(heap)
        fresh = getattr(line, key) - covered
        if not fresh:
            continue
        gain = -len(fresh) / line.size
        if gain > stale and heap and (gain, order) > heap[0][:2]:
            heapq.heappush(heap, (gain, order, line))
            continue
        chosen.append(line)
        covered |= fresh
    return chosen


class _Plan:
    """One item's lines in priority order, with the bytes each phase needs (cumulative)."""

    __slots__ = ("ordered", "needs")

    def __init__(self, lines: list[_Line], shown: set[str]) -> None:
        """``shown``: names already shown elsewhere, not worth a line again."""
        phases: list[list[_Line]] = [[] for _ in range(_PHASES)]
        for line in lines:
            if line.score >= SCORE_CALL:
                phases[_CALLS].append(line)
            elif line.score >= SCORE_ERROR:
                phases[_ERRORS].append(line)
            elif line.score >= SCORE_EDIT:
                phases[_EDITS].append(line)
        fixed = [line for phase in phases[:_NAMED] for line in phase]
        names = set().union(*(line.names for line in fixed)) if fixed else set()
        paths = set().union(*(line.paths for line in fixed)) if fixed else set()
        rest = [line for line in lines if line.score < SCORE_EDIT]
        phases[_NAMED] = _cover(rest, names | shown, "names")
        taken = {id(line) for line in phases[_NAMED]}
        for line in phases[_NAMED]:
            paths |= line.paths
        phases[_PATHS] = _cover([line for line in rest if id(line) not in taken], paths, "paths")
        taken |= {id(line) for line in phases[_PATHS]}
        left = [line for line in rest if id(line) not in taken]
        phases[_NOTES] = sorted((line for line in left if SCORE_NOTE <= line.score < SCORE_PATH),
                                key=lambda line: (-line.score, line.order))
        phases[_ENDS] = [line for line in left if line.score == SCORE_END]
        self.ordered = [(phase, line) for phase, members in enumerate(phases) for line in members]
        self.needs = []
        total = 0
        for members in phases:
            total += sum(line.size for line in members)
            self.needs.append(total)


def _render(plan: _Plan, limit: int) -> str:
    """The lines of ``plan`` that fit in ``limit`` bytes, taken in priority order, shown in their
    original order."""
    chosen: list[tuple[int, str]] = []
    room = limit + 1
    for phase, line in plan.ordered:
        if line.size <= room:
            chosen.append((line.order, line.text))
            room -= line.size
        elif phase <= _ERRORS and room > _MIN_CUT:  # a call or error line is cut rather than lost
            text = _cut(line.text, room - 1)
            chosen.append((line.order, text))
            room -= utf8_len(text) + 1
    return "\n".join(text for _, text in sorted(chosen))


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` bytes; a call line keeps its ``→ exit N`` ending."""
    head, arrow, code = text.rpartition(" → exit ")
    if arrow and code.lstrip("-").isdigit():
        ending = arrow + code
        return fit_end(head, limit - utf8_len(ending)) + ending
    return fit_end(text, limit)


def _limit(text: str, cap: int) -> int:
    return min(cap, utf8_len(text) - 1)


def summarize_item(text: str, budget: int, names: frozenset[str] = frozenset()) -> str:
    """Extractive summary of one item within ``budget`` bytes and strictly shorter than ``text``: its most
    salient lines in their original order. An item of 0 or 1 byte gets ``""``."""
    limit = _limit(text, budget)
    if limit <= 0:
        return ""
    summary = _render(_Plan(_item_lines(text, names), set()), limit)
    return summary or fit_end(squeezed_window(text, limit), limit)


def _allocate(needs: list[list[int]], caps: list[int], total: int) -> list[int]:
    """Bytes per item: phase by phase (most salient lines first), every item's need at that phase is met
    when the rest of ``total`` allows, else the rest is shared max-min fairly."""
    granted = [0] * len(caps)
    remaining = total
    for level in range(_PHASES):
        wants = [max(0, min(caps[i], needs[i][level]) - granted[i]) for i in range(len(caps))]
        if sum(wants) <= remaining:
            for i, want in enumerate(wants):
                granted[i] += want
            remaining -= sum(wants)
            continue
        open_items = [i for i, want in enumerate(wants) if want > 0]
        while open_items and remaining > 0:
            share = max(1, remaining // len(open_items))
            for i in list(open_items):
                give = min(share, wants[i], remaining)
                granted[i] += give
                wants[i] -= give
                remaining -= give
                if wants[i] == 0:
                    open_items.remove(i)
        break
    return granted


def summarize_items(items: dict[str, Any], budget: int, max_output_bytes: int | None = None,
                    total: int | None = None, names: frozenset[str] = frozenset()) -> dict[str, str]:
    """Summaries for exactly the ids of ``items`` (non-string values are read as their compact JSON).

    ``budget`` caps each summary; ``total`` (default ``budget`` × items) is spent across the items by
    salience: every item's calls and errors first, then edit results, lines naming ``names``, paths, notes
    and output ends. With ``max_output_bytes`` (the caller's ``max_tokens × 4``) the total shrinks so the
    whole reply fits, leaving an eighth for JSON escaping, as a real model's output limit would require.
    """
    texts = {key: value if isinstance(value, str) else dense_dumps(value) for key, value in items.items()}
    if not texts:
        return {}
    total = budget * len(texts) if total is None else total
    if max_output_bytes is not None:
        available = max_output_bytes - dense_size({key: "" for key in texts})
        total = min(total, max(len(texts), available * 7 // 8))
        budget = min(budget, total)
    keys = list(texts)
    lines = [_item_lines(texts[key], names) for key in keys]
    caps = [max(0, _limit(texts[key], budget)) for key in keys]
    expected: set[str] = set()  # names the items before show when granted their cap
    needs = []
    for item, cap in zip(lines, caps):
        plan = _Plan(item, expected)
        needs.append(plan.needs)
        expected |= _names_of(_render(plan, cap), names)
    granted = _allocate(needs, caps, total)
    shown: set[str] = set()  # names the summaries so far do show
    out: dict[str, str] = {}
    for key, item, limit, cap in zip(keys, lines, granted, caps):
        summary = _render(_Plan(item, set(shown)), limit) if limit > 0 else ""
        if not summary and cap > 0:
            fallback = max(1, min(cap, 48))
            summary = fit_end(squeezed_window(texts[key], fallback), fallback)
        shown |= _names_of(summary, names)
        out[key] = summary
    return out


def summarize_json_request(user_content: str, budget: int, max_output_bytes: int | None = None,
                           total: int | None = None, names: frozenset[str] = frozenset()) -> str:
    """The JSON-mode reply: compact JSON mapping every id of ``user_content`` to its summary.

    Raises ``ValueError`` when ``user_content`` is not a JSON object.
    """
    items = strict_loads(user_content)
    if not isinstance(items, dict):
        raise ValueError("the user message must be a JSON object mapping ids to items")
    return dense_dumps(summarize_items(items, budget, max_output_bytes, total, names))


def split_rendered(rendered: str) -> list[tuple[str, str]]:
    """``(role, content)`` pairs of a conversation rendered as ``<role>: <content>`` lines.

    A line that starts with a known role and ``": "`` opens a new message; other lines continue the
    current one (text before the first role line counts as ``user``).
    """
    pieces: list[tuple[str, str]] = []
    starts = list(re.finditer(_ROLE_PREFIX, rendered))
    if not starts or starts[0].start() > 0:
        head_end = starts[0].start() if starts else len(rendered)
        pieces.append(("user", rendered[:head_end].rstrip("\n")))
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(rendered)
        pieces.append((match.group(1), rendered[match.end():end].rstrip("\n")))
    return pieces


def _entries(lines: list[str]) -> list[str]:
    return [fit_end(squeeze(line), _SEAL_ENTRY_BYTES) for line in lines]


def _decision_sentences(prose: str) -> list[str]:
    return [fit_end(squeeze(sentence), _SEAL_ENTRY_BYTES)
            for sentence in _SENTENCE_END.split(prose) if _decision_words().search(sentence)]


def _counted(commands: list[str]) -> list[str]:
    """``$ command`` entries in order of first use, with ``×N`` when a command ran N > 1 times."""
    counts: dict[str, int] = {}
    for command in commands:
        counts[command] = counts.get(command, 0) + 1
    return [f"$ {command} ×{count}" if count > 1 else f"$ {command}" for command, count in counts.items()]


_task_line = lazy(r"^task: (.*)$", re.MULTILINE)  # as _decision_words
# The roles of an earlier seal's summary: system (openai-chat), developer (openai-responses), user (anthropic-messages).
# An assistant's text or a tool's output that starts with the marker (a summary read back from a file) is not one.
_SEAL_ROLES = ("system", "developer", "user")


def _rendered_call(name: str, arguments: str) -> str:
    """A ``[tool call name(args)]`` line as ``command`` (shell tools) or ``name(args)``."""
    action = tool_call_action({"function": {"name": name, "arguments": arguments}})
    if action is None:
        return f"{name}({arguments})"
    return action.command if action.command is not None else action.describe()


def summarize_conversation(rendered: str, limit: int) -> str:
    """Dense extractive hand-off of a rendered conversation within ``limit`` bytes, shorter than it: the
    task, an earlier seal carried forward, the current state, errors, commands with exit codes (tool
    calls included), files, decisions and later requests. Instructions inside the conversation are only
    quoted, never followed (nothing here acts on them)."""
    limit = min(limit, utf8_len(rendered) - 1)
    if limit <= 0:
        return ""
    messages = split_rendered(rendered)
    task = latest = ""
    earlier: list[str] = []  # every earlier seal's text, in order (a conversation sealed before holds one or more)
    commands: list[str] = []
    errors: dict[str, None] = {}
    notes: dict[str, None] = {}
    requests: dict[str, None] = {}
    awaiting: list[int] = []  # indexes of commands still waiting for their exit code
    for role, text in messages:
        if role in _SEAL_ROLES and text.startswith(_SEAL_HEAD):
            earlier.append(text[len(_SEAL_HEAD):].strip())
            carried = _task_line().search(earlier[-1])
            task = task or (carried.group(1) if carried else "")
        elif role in RESULT_ROLES or (role == "user" and ("<returncode>" in text or text.lstrip().startswith(
                ("OBSERVATION", "EXECUTION RESULT")))):
            codes = return_codes(text)
            if codes and awaiting:
                commands[awaiting.pop(0)] += f" (exit {codes[0]})"
            errors.update(dict.fromkeys(_entries(error_lines(strip_output_tags(text)))))
        elif role == "user":
            if not task:
                task = text
            else:
                requests[fit_end(squeeze(text), _SEAL_ENTRY_BYTES)] = None
        elif role == "assistant":
            calls = [_rendered_call(name, arguments) for name, arguments in tool_call_pattern().findall(text)]
            found = calls + fenced_commands(text)
            awaiting = list(range(len(commands), len(commands) + len(found))) if found else awaiting
            commands.extend(fit_end(squeeze(command), _SEAL_ENTRY_BYTES) for command in found)
            prose = tool_call_pattern().sub(" ", re.sub(r"```.*?```", " ", text, flags=re.DOTALL))
            if prose.strip():
                latest = prose
            notes.update(dict.fromkeys(_decision_sentences(prose)))
        else:
            errors.update(dict.fromkeys(_entries(error_lines(text))))
    digest_paths = paths_in(" ".join([*commands, *errors, *notes]))[:_MAX_PATHS]
    header = f"Extractive digest of {len(messages)} messages (built-in summarizer, no model)."
    sections = [
        Section("", header, 0.03),
        Section("task", squeezed_window(task, limit), 0.2),
        Section("earlier", squeezed_window(" | ".join(earlier), limit), 0.15, elide_middle=True),
        Section("state", squeezed_window(latest, limit), 0.1, elide_middle=True),
        Section("errors", " | ".join(errors), 0.12, elide_middle=True),
        Section("commands", " ; ".join(_counted(commands)), 0.15, elide_middle=True),
        Section("files", ", ".join(digest_paths), 0.07, separator=", "),
        Section("decisions", " | ".join(notes), 0.12, elide_middle=True),
        Section("requests", " | ".join(requests), 0.06, elide_middle=True),
    ]
    summary = fit_sections(sections, limit)
    return summary or fit_end(squeezed_window(rendered, limit), limit)
