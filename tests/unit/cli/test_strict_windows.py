"""``compactor compact --strict`` exits 3 when any model call fell back (README, "Command line"), whether the
transcript ran as one request, in windows in memory (over one request's limits) or streamed (a file over the
streaming threshold). A windowed run's record has no flow nodes, only its windows' fallbacks: ``--strict`` read the
nodes alone and exited 0 while every decision call had fallen back, and the streamed path never looked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor_cli import compact_cmd
from compactor_cli.main import main

pytestmark = pytest.mark.usefixtures("bundled_catalog")

# Admitted, but no offer satisfies it: every decision call fails (no_candidates) and its batch keeps its units.
NO_OFFER = json.dumps(["policy", ["bot"], ["zero"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]])


def transcript(calls: int) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are a coding agent."},
                                         {"role": "user", "content": "Fix the failing tests."}]
    for i in range(calls):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                      "function": {"name": "bash", "arguments": json.dumps({"command": f"cat src/f{i}.py"})}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": f"def f{i}():\n" + "    x = 1\n" * 80}]
    return messages + [{"role": "assistant", "content": "Done."}]


@pytest.mark.parametrize("calls, stream_bytes", [(20, 10**9), (140, 10**9), (140, 1000)],
                         ids=["one request", "windows in memory", "streamed"])
def test_strict_exits_3_when_decision_calls_fell_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], calls: int,
                                                      stream_bytes: int) -> None:
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(transcript(calls)))
    out = tmp_path / "out.json"

    code = main(["compact", str(path), "-o", str(out), "--strict", "--decision-policy", NO_OFFER])

    err = capsys.readouterr().err
    assert code == 3, err
    assert "fell back" in err and json.loads(out.read_text())  # the output is still written
    assert main(["compact", str(path), "-o", str(out), "--strict", "-q"]) == 0  # the offline offers answer


@pytest.mark.parametrize("calls", [20, 140], ids=["one request", "windows in memory"])
def test_the_json_answer_counts_what_fell_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], calls: int) -> None:
    """The answer's ``compaction.fallbacks`` counts the flow nodes that fell back by kind, one request or windows:
    a windowed run's answer carries no ``x_router``, so it said nowhere that its decisions had all failed."""
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 10**9)
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(transcript(calls)))
    out = tmp_path / "out.json"

    assert main(["compact", str(path), "-o", str(out), "--json", "-q", "--decision-policy", NO_OFFER]) == 0

    report = json.loads(out.read_text())["compaction"]
    assert set(report["fallbacks"]) == {"no_candidates"} and report["fallbacks"]["no_candidates"] >= 1, report
    assert main(["compact", str(path), "-o", str(out), "--json", "-q"]) == 0  # the offline offers answer
    assert "fallbacks" not in json.loads(out.read_text())["compaction"]
