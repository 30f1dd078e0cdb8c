"""The built-in extractive summarizer: no model, only selection and elision of the input's own text.

JSON mode (the compaction preset's summary node): the user message maps ids to item texts (usually
the compact JSON of a tool call with its results, or of one message). Each item becomes a few
labelled lines chosen in priority order: the call(s) (``$ command`` or ``name(args)``), exit
codes, error lines, file paths, the head and tail of the output, then the agent's own note. Each
line gets a guaranteed share of the byte budget and leftovers go to the higher-priority lines;
every elision is marked with ``…``. Nothing is paraphrased or invented.

Plain mode (legacy seal): the rendered conversation (``<role>: <content>`` lines) becomes a digest
of the task, the latest assistant statement, errors, commands with their exit codes, files and
sentences that announce decisions or next steps, within ``max_tokens × 4`` bytes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from compactor.jsonutil import dense_dumps, dense_size, strict_loads
from compactor.offline.text_fit import (
    Section, fit_end, fit_sections, squeeze, squeezed_window, utf8_len,
)
from compactor.offline.transcript_reading import (
    as_messages, content_text, error_lines, fenced_commands, is_observation, message_actions, paths_in,
    prose_text, return_codes, strip_output_tags,
)

SUMMARIZER_MODEL = "builtin-extractive-summarizer"
DEFAULT_ITEM_BUDGET = 256
DEFAULT_SEAL_MAX_TOKENS = 512
BYTES_PER_TOKEN = 4
_BUDGET_PHRASE = re.compile(r"at most\s+(\d+)\s+UTF-8 bytes", re.IGNORECASE)
_ROLE_PREFIX = re.compile(r"^(system|developer|user|assistant|tool|function|exit): ", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_DECISION_WORDS = re.compile(
    r"\b(?:I'll|I will|we will|let me|decided?|need to|should|must|plan|next|todo|fix(?:ed|es)?"
    r"|root cause|the (?:issue|problem|bug) is|remaining|not yet|still)\b",
    re.IGNORECASE,
)
# Each command, error line or decision sentence of a seal digest is cut to this many bytes.
_SEAL_ENTRY_BYTES = 200
_MAX_PATHS = 24


def item_budget(system_text: str) -> int:
    """The per-summary byte budget named by ``at most <N> UTF-8 bytes`` in ``system_text`` (else 256)."""
    match = _BUDGET_PHRASE.search(system_text)
    return int(match.group(1)) if match else DEFAULT_ITEM_BUDGET


def _message_sections(messages: list[dict[str, Any]], limit: int) -> list[Section]:
    # Calls and notes are cut at their end, so only their first ``view`` characters can be shown.
    view = 2 * limit + 16
    calls: list[str] = []
    codes: list[int] = []
    observations: list[str] = []
    notes: list[str] = []
    for message in messages:
        actions = message_actions(message)
        if actions:
            calls.extend(squeeze(action.describe()[:view]) for action in actions)
            notes.append(prose_text(message)[:view])
        elif is_observation(message):
            text = content_text(message.get("content"))
            codes.extend(return_codes(text))
            observations.append(strip_output_tags(text))
        else:
            observations.append(content_text(message.get("content")))
    output = "\n".join(observations)
    errors = error_lines(output)
    window = squeezed_window(output, limit)
    call_text = " ; ".join(calls)
    error_text = " | ".join(squeeze(line) for line in errors)
    if window in error_text:  # a short output made only of error lines is shown once
        window = ""
    note = squeeze(" ".join(notes)[:view])
    paths = paths_in(" ".join([call_text[:view], *errors, note]))[:_MAX_PATHS]
    return [
        Section("call", call_text, 0.35),
        Section("exit", ", ".join(map(str, codes)), 0.05),
        Section("errors", error_text, 0.25, elide_middle=True),
        Section("paths", ", ".join(paths), 0.15, grows=False, separator=", "),
        Section("output", window, 0.25, elide_middle=True),
        Section("note", note, 0.0),
    ]


def _text_sections(text: str, limit: int) -> list[Section]:
    errors = error_lines(text)
    window = squeezed_window(text, limit)
    paths = paths_in(" ".join([*errors, window]))[:_MAX_PATHS]
    return [
        Section("errors", " | ".join(squeeze(line) for line in errors), 0.3, elide_middle=True),
        Section("paths", ", ".join(paths), 0.15, grows=False, separator=", "),
        Section("text", window, 0.55, elide_middle=True),
    ]


def summarize_item(text: str, budget: int) -> str:
    """Extractive summary of one item within ``budget`` bytes and strictly shorter than ``text``.

    An item of 0 or 1 byte cannot be shortened into a non-empty summary; it gets ``""``.
    """
    limit = min(budget, utf8_len(text) - 1)
    if limit <= 0:
        return ""
    try:
        messages = as_messages(json.loads(text))
    except (ValueError, RecursionError):
        messages = None
    sections = _message_sections(messages, limit) if messages else _text_sections(text, limit)
    summary = fit_sections(sections, limit)
    return summary or fit_end(squeezed_window(text, limit), limit)


def summarize_items(items: dict[str, Any], budget: int, max_output_bytes: int | None = None) -> dict[str, str]:
    """Summaries for exactly the ids of ``items`` (non-string values are read as their compact JSON).

    With ``max_output_bytes`` (the caller's ``max_tokens × 4``) the per-item budget shrinks so the
    whole reply fits, leaving an eighth of each share for JSON escaping, as a real model's output
    limit would require.
    """
    per_item = budget
    if max_output_bytes is not None and items:
        available = max_output_bytes - dense_size({key: "" for key in items})
        per_item = min(budget, max(1, available // len(items) * 7 // 8))
    return {
        key: summarize_item(value if isinstance(value, str) else dense_dumps(value), per_item)
        for key, value in items.items()
    }


def summarize_json_request(user_content: str, budget: int, max_output_bytes: int | None = None) -> str:
    """The JSON-mode reply: compact JSON mapping every id of ``user_content`` to its summary.

    Raises ``ValueError`` when ``user_content`` is not a JSON object.
    """
    items = strict_loads(user_content)
    if not isinstance(items, dict):
        raise ValueError("the user message must be a JSON object mapping ids to items")
    return dense_dumps(summarize_items(items, budget, max_output_bytes))


def split_rendered(rendered: str) -> list[tuple[str, str]]:
    """``(role, content)`` pairs of a conversation rendered as ``<role>: <content>`` lines.

    A line that starts with a known role and ``": "`` opens a new message; other lines continue the
    current one (text before the first role line counts as ``user``).
    """
    pieces: list[tuple[str, str]] = []
    starts = list(_ROLE_PREFIX.finditer(rendered))
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
            for sentence in _SENTENCE_END.split(prose) if _DECISION_WORDS.search(sentence)]


def _counted(commands: list[str]) -> list[str]:
    """``$ command`` entries in order of first use, with ``×N`` when a command ran N > 1 times."""
    counts: dict[str, int] = {}
    for command in commands:
        counts[command] = counts.get(command, 0) + 1
    return [f"$ {command} ×{count}" if count > 1 else f"$ {command}" for command, count in counts.items()]


def summarize_conversation(rendered: str, limit: int) -> str:
    """Dense extractive digest of a rendered conversation within ``limit`` bytes, shorter than it."""
    limit = min(limit, utf8_len(rendered) - 1)
    if limit <= 0:
        return ""
    messages = split_rendered(rendered)
    task = ""
    latest = ""
    commands: list[str] = []
    errors: dict[str, None] = {}
    notes: dict[str, None] = {}
    awaiting_exit = False  # the last command has not met its observation yet
    for role, text in messages:
        if role in ("tool", "user") and "<returncode>" in text:
            codes = return_codes(text)
            if codes and awaiting_exit:
                commands[-1] += f" (exit {codes[-1]})"
            awaiting_exit = False
            errors.update(dict.fromkeys(_entries(error_lines(strip_output_tags(text)))))
        elif role == "user" and not task:
            task = text
        elif role == "assistant":
            fenced = fenced_commands(text)
            commands.extend(fit_end(squeeze(command), _SEAL_ENTRY_BYTES) for command in fenced)
            awaiting_exit = awaiting_exit or bool(fenced)
            prose = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
            if prose.strip():
                latest = prose
            notes.update(dict.fromkeys(_decision_sentences(prose)))
        else:
            errors.update(dict.fromkeys(_entries(error_lines(text))))
    digest_paths = paths_in(" ".join([*commands, *errors, *notes]))[:_MAX_PATHS]
    header = f"Extractive digest of {len(messages)} messages (built-in summarizer, no model)."
    sections = [
        Section("", header, 0.05),
        Section("task", squeezed_window(task, limit), 0.15),
        Section("latest", squeezed_window(latest, limit), 0.15, elide_middle=True),
        Section("errors", " | ".join(errors), 0.15, elide_middle=True),
        Section("commands", " ; ".join(_counted(commands)), 0.2, elide_middle=True),
        Section("files", ", ".join(digest_paths), 0.1, separator=", "),
        Section("decisions", " | ".join(notes), 0.2, elide_middle=True),
    ]
    summary = fit_sections(sections, limit)
    return summary or fit_end(squeezed_window(rendered, limit), limit)
