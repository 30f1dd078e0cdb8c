"""Real agent transcripts (``tests/fixtures/corpus``) through both modes with the bundled built-in
offline offers, the real Router and flow runtime: every invariant holds, large transcripts really
shrink, legacy mode seals without losing a message, and the CLI writes a smaller transcript."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compactor import service
from compactor.budget import Deadline
from compactor.catalog import load_catalog
from compactor.transcripts import parse_transcript
from compactor.compaction.preset import load_preset
from compactor.models import CompactRequest
from compactor.providers.base import ChatRequest, Offer
from compactor.providers.registry import transport_for
from compactor.router import Router

from ..property.invariants import SEAL_MARKER, check_decision_body, csize

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
FILES = sorted(CORPUS.glob("*.json")) + sorted(CORPUS.glob("*.jsonl"))
DECISION_POLICY = load_preset()["flow"][1]["classify"]["policy"]
LARGE = 150_000  # bytes: every such corpus transcript must shrink clearly
MAX_LARGE_RATIO = 0.6  # the built-ins reach 0.16–0.51 on these (checked when this test was written)
VENV_BIN = Path(sys.executable).parent


def load(path: Path) -> list[dict[str, Any]]:
    messages, _ = parse_transcript(path.read_text(encoding="utf-8"))
    return messages


def task_pin(messages: list[dict[str, Any]]) -> list[int]:
    """The genuine user input of an agent run: its first user message (as SubZeroClaw pins)."""
    return [next(i for i, m in enumerate(messages) if m.get("role") == "user")]


class Recording:
    """The built-in transport, with the chat requests it was sent kept for inspection."""

    def __init__(self) -> None:
        self.chats: list[ChatRequest] = []

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> Any:
        self.chats.append(request)
        return await transport_for(offer).chat(offer, request, timeout_s)

    async def decide(self, offer: Offer, request: Any, timeout_s: float) -> Any:
        return await transport_for(offer).decide(offer, request, timeout_s)


def run(messages: list[dict[str, Any]], transport: Any = None, **fields: Any) -> tuple[int, dict[str, Any]]:
    catalog = load_catalog()  # the bundled catalog: built-in offline offers only
    router = Router(catalog.offers, envelope=catalog.policy_envelope,
                    transport_for=(lambda offer: transport) if transport else transport_for)
    request = CompactRequest(messages=messages, **fields)
    return asyncio.run(service.compact(request, deadline=Deadline.after_ms(600_000), router=router))


def test_the_corpus_is_there() -> None:
    assert len(FILES) == 10 and any(p.suffix == ".jsonl" for p in FILES)
    assert any(m.get("role") == "exit" for p in FILES for m in load(p))


# -- decision mode ---------------------------------------------------------------------------------

CONFIGS = [  # (keep_recent, target_ratio, pins: "default" = every user message, "task" = the first one)
    (6, 0.1, "default"),
    (6, 0.3, "default"),
    (6, 0.1, "task"),
    (6, 0.3, "task"),
    (1, 0.1, "task"),
]


@pytest.mark.parametrize("keep_recent,target_ratio,pins", CONFIGS)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem[:40])
def test_decision_mode_on_real_transcripts(path: Path, keep_recent: int, target_ratio: float, pins: str) -> None:
    messages = load(path)
    pinned = task_pin(messages) if pins == "task" else None
    status, body = run(messages, keep_recent=keep_recent, target_ratio=target_ratio, pinned_indices=pinned,
                       decision_policy_ir=DECISION_POLICY)
    assert status == 200, body
    check_decision_body(messages, body, keep_recent=keep_recent, pinned_indices=pinned, target_ratio=target_ratio)
    assert body["messages"][-1] == messages[-1]  # the final message (an ``exit`` record in msa-v2) is kept
    report = body["compaction"]
    if "x_router" in body:
        assert body["x_router"]["cost_usd"] == 0.0  # the built-ins are free and say so
    # Text-mode agents send every observation as a ``user`` message: those are not pinned by default
    # (docs/differences.md), so they shrink like tool-calling agents.
    if report["original_bytes"] >= LARGE:
        assert report["output_bytes"] <= MAX_LARGE_RATIO * report["original_bytes"], report["output_bytes"]
        assert body["compacted"] and report["first_changed_index"] >= 2  # system prompt and task untouched


def test_claude_code_jsonl_units() -> None:
    """The Claude Code session becomes OpenAI messages whose tool results follow their calls."""
    messages = load(next(p for p in FILES if p.suffix == ".jsonl"))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "assistant", "tool",
                                             "assistant"]
    status, body = run(messages, keep_recent=1, decision_policy_ir=DECISION_POLICY)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1)
    assert body["compaction"]["output_bytes"] < body["compaction"]["original_bytes"]


# -- legacy mode -----------------------------------------------------------------------------------

@pytest.mark.parametrize("keep_recent", [5, 6])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem[:40])
def test_legacy_seal_on_real_transcripts(path: Path, keep_recent: int) -> None:
    messages = load(path)
    recording = Recording()
    status, body = run(messages, recording, keep_recent=keep_recent)
    assert status == 200
    out = body["messages"]
    frozen = 1 if messages[0].get("role") == "system" else 0
    if len(messages) - frozen <= keep_recent:
        assert body == {"messages": messages, "compacted": False}
        return
    assert body["compacted"] is True and set(body) <= {"messages", "compacted", "usage", "x_router"}
    assert out[:frozen] == messages[:frozen]
    sealed = out[frozen]
    assert sealed["role"] == "system" and sealed["content"].startswith(SEAL_MARKER)
    assert sealed["content"][len(SEAL_MARKER):].strip()
    recent = out[frozen + 1:]
    start = len(messages) - len(recent)
    assert recent == messages[start:] and len(recent) >= keep_recent  # tail intact
    # No message lost: a tool result never starts the tail; its whole unit moves into the tail instead.
    assert recent[0].get("role") != "tool"
    if messages[len(messages) - keep_recent].get("role") == "tool":
        assert recent[0].get("tool_calls") and start < len(messages) - keep_recent
    # Everything between the system prompt and the tail went to the summarizer.
    (request,) = recording.chats
    rendered = request.messages[-1]["content"]
    aged = messages[frozen:start]
    assert rendered.startswith(f"{aged[0]['role']}: ")
    for message in aged:
        content = message.get("content")
        if isinstance(content, str) and content:
            assert content in rendered
    assert csize(out) < csize(messages)


def test_legacy_keeps_the_unit_the_reference_would_cut() -> None:
    """At least one corpus case exercises the reference's anti-orphan drop (a tool result that would start the
    tail; docs/differences.md: seal mode widens the tail instead)."""
    cases = [(p.name, k) for p in FILES for k in (5, 6) if load(p)[len(load(p)) - k].get("role") == "tool"]
    assert cases


# -- the CLI ---------------------------------------------------------------------------------------

def test_cli_compacts_a_corpus_file(tmp_path: Path) -> None:
    source = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k != "COMPACTOR_CATALOG"}
    done = subprocess.run([str(VENV_BIN / "compactor"), "compact", str(source), "--output", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # the body went to --output, the report to stderr
    assert "fragment_" in done.stderr and "compacted: " in done.stderr and f"wrote {out} (" in done.stderr
    original = json.loads(source.read_text(encoding="utf-8"))
    written = json.loads(out.read_text(encoding="utf-8"))
    assert isinstance(written, list) and all(isinstance(m, dict) and "role" in m for m in written)
    assert csize(written) < 0.6 * csize(original)
    assert written[:2] == original[:2] and written[-1] == original[-1]  # pins and (at least) the last message


def test_target_ratio_orders_the_results_and_the_report_says_what_limits_them() -> None:
    """A looser target gives a larger output (within 0.5 %: once the summary reply's max_tokens bounds a
    batch, larger per-summary caps only share the same bytes differently); the report's parts add up to
    the output and the smallest reachable ratio is what pins and tail alone weigh (docs/offline-offers.md)."""
    for path in [p for p in FILES if "pydicom-901" in p.name or "sphinx-9229" in p.name]:
        messages = load(path)
        sizes = []
        for target in (0.05, 0.1, 0.3, 0.6):
            status, body = run(messages, target_ratio=target, decision_policy_ir=DECISION_POLICY)
            assert status == 200
            report = body["compaction"]
            limits = report["limits"]
            parts = sum(limits[f"{name}_bytes"] for name in ("pins", "tail", "kept_units", "summaries"))
            assert parts == report["output_bytes"] - 2 + 1  # each message counted with its comma, no brackets
            assert report["output_bytes"] == csize(body["messages"])  # measured from the known sizes
            assert limits["smallest_ratio"] * report["original_bytes"] <= report["output_bytes"]
            assert limits["limited_by"] in ("pins", "tail", "kept_units", "summaries")
            sizes.append(report["output_bytes"])
        assert all(later >= 0.995 * earlier for earlier, later in zip(sizes, sizes[1:])), sizes
        assert sizes[0] < sizes[-1], sizes
