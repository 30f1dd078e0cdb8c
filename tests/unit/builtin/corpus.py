"""Real transcripts from ``tests/fixtures/corpus`` cut into units the way the compaction preset cuts them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compactor.markers import EVIDENCE_MARKER

CORPUS_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
TRANSCRIPTS = sorted(CORPUS_DIR.glob("*.json"))
CRITERIA = {
    "keep": "Preserve verbatim",
    "summarize": "Shorter summary of the useful facts",
    "archive": "Remove; the caller keeps the original",
}


def load_messages(path: Path) -> list[dict[str, Any]]:
    """The messages array of one corpus transcript."""
    return json.loads(path.read_text(encoding="utf-8"))


def units(messages: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``(fragment_<start>, messages)``: a tool-calling message with its following tool results, else one message."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    index = 0
    while index < len(messages):
        end = index + 1
        if messages[index].get("tool_calls"):
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
        out.append((f"fragment_{index}", messages[index:end]))
        index = end
    return out


def evidence_view(unit_messages: list[dict[str, Any]]) -> tuple[str, bool]:
    """The decision evidence of a unit (docs/behaviour.md#decision, decision context) and whether it is an excerpt."""
    text = json.dumps(unit_messages)
    if len(text) > 2000:
        return text[:1000] + EVIDENCE_MARKER + text[-1000:], True
    return text, False


def choice_question(excerpted: bool) -> dict[str, Any]:
    """The preset's fragment question; an excerpt loses ``archive``."""
    criteria = {label: text for label, text in CRITERIA.items() if not (excerpted and label == "archive")}
    return {"type": "choice", "instructions": "Classify this evidence.", "criteria": criteria}
