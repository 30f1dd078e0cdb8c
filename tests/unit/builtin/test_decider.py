"""The rules decider on hand-made compaction states and on real transcripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactor.decision_validation import validate_answers, validate_payload
from compactor.offline.decider import ERROR_KEEP_BYTES, SMALL_EVIDENCE_BYTES, decide

from .corpus import TRANSCRIPTS, choice_question, evidence_view, load_messages, units


def tool_unit(command: str, output: str, returncode: int = 0, call_id: str = "call_1") -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
        {"role": "tool", "tool_call_id": call_id,
         "content": f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>"},
    ]


def compaction_payload(fragments: dict[str, list[dict[str, Any]]],
                       recent: list[list[dict[str, Any]]] = ()) -> dict[str, Any]:
    """A decision payload shaped like the compaction preset's."""
    views = {fragment_id: evidence_view(messages) for fragment_id, messages in fragments.items()}
    state = {
        "instructions": [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "Fix it."}],
        "recent_evidence": [json.dumps(messages, separators=(",", ":")) for messages in recent],
        "fragments": [{"id": fragment_id, "evidence": text} for fragment_id, (text, _) in views.items()],
    }
    questions = {fragment_id: choice_question(excerpted) for fragment_id, (_, excerpted) in views.items()}
    return {"state": state, "questions": questions}


def choices(payload: dict[str, Any]) -> dict[str, str]:
    answers = decide(payload["state"], payload["questions"])
    validate_answers(payload["questions"], {"model": "builtin-rules-decider", "answers": answers})
    return {name: answer["choice"] for name, answer in answers.items()}


def test_small_error_superseded_and_bulky_fragments() -> None:
    payload = compaction_payload({
        "fragment_2": tool_unit("grep -n load src/app.py", "12: def load():"),
        "fragment_4": tool_unit("python -m pytest", "Traceback (most recent call last):\nKeyError: 'a'", 1),
        "fragment_6": tool_unit("make build", "compiling module\n" * 80),
        "fragment_8": tool_unit("grep -n load src/app.py", "12: def load():\n40: load()"),
        "fragment_10": tool_unit("cat README", "fine"),
    })
    validate_payload(payload)
    assert choices(payload) == {
        "fragment_2": "archive",    # the same grep runs again in fragment_8
        "fragment_4": "keep",       # traceback and exit code 1
        "fragment_6": "summarize",  # bulky, error-free, excerpted
        "fragment_8": "keep",       # small and not superseded
        "fragment_10": "keep",
    }
    answers = decide(payload["state"], payload["questions"])
    assert {name: answer["reason"] for name, answer in answers.items()} == {
        "fragment_2": "superseded", "fragment_4": "error", "fragment_6": "bulky", "fragment_8": "small",
        "fragment_10": "small"}


def test_bulky_fragment_is_summarized_even_without_excerpt() -> None:
    messages = tool_unit("ls -R docs", "docs/page.rst\n" * 60)
    assert SMALL_EVIDENCE_BYTES < len(json.dumps(messages)) <= 2000
    assert choices(compaction_payload({"fragment_2": messages})) == {"fragment_2": "summarize"}


def test_the_size_rules_read_the_fragment_bytes_when_the_state_gives_them() -> None:
    """Evidence shows the model view; ``bytes`` is what keeping the unit costs (harness fields included)."""
    payload = compaction_payload({"fragment_2": tool_unit("ls", "a.py"),
                                  "fragment_4": tool_unit("make", "error: no rule", returncode=2)})
    assert choices(payload) == {"fragment_2": "keep", "fragment_4": "keep"}
    for fragment in payload["state"]["fragments"]:
        fragment["bytes"] = ERROR_KEEP_BYTES + 1
    assert choices(payload) == {"fragment_2": "summarize", "fragment_4": "summarize"}


def test_non_zero_exit_code_alone_keeps_a_fragment() -> None:
    messages = tool_unit("test -f setup.cfg", "x" * 900, returncode=1)
    assert choices(compaction_payload({"fragment_2": messages})) == {"fragment_2": "keep"}


def test_file_reads_are_superseded_by_a_reread_or_a_rewrite_in_recent_evidence() -> None:
    read = tool_unit("cd /repo && cat src/app.py", "def load():\n    return {}\n" * 5)
    rewrite = tool_unit("cat <<'EOF' > /repo/src/app.py\ndef load():\n    return {'a': 1}\nEOF", "")
    partial_read = tool_unit("sed -n '1,5p' /repo/src/app.py", "def load():")
    payload = compaction_payload({"fragment_2": read, "fragment_4": partial_read}, recent=[rewrite])
    assert choices(payload) == {"fragment_2": "archive", "fragment_4": "keep"}


def legacy_function_unit(command: str, output: str, returncode: int = 0) -> list[dict[str, Any]]:
    """:func:`tool_unit` as the deprecated chat ``function_call`` and its ``function`` answer."""
    call, result = tool_unit(command, output, returncode)
    return [{"role": "assistant", "content": "", "function_call": call["tool_calls"][0]["function"]},
            {"role": "function", "name": "bash", "content": result["content"]}]


def test_a_legacy_function_call_is_judged_as_a_tool_call() -> None:
    payload = compaction_payload({
        "fragment_2": legacy_function_unit("grep -n load src/app.py", "12: def load():"),
        "fragment_4": legacy_function_unit("python -m pytest", "Traceback (most recent call last):\nKeyError: 'a'", 1),
        "fragment_8": legacy_function_unit("grep -n load src/app.py", "12: def load():\n40: load()"),
    })
    answers = decide(payload["state"], payload["questions"])
    assert {name: answer["reason"] for name, answer in answers.items()} == {
        "fragment_2": "superseded", "fragment_4": "error", "fragment_8": "small"}


def test_an_excerpt_is_never_archived() -> None:
    big = tool_unit("cat src/big.py", "line of code\n" * 400)
    payload = compaction_payload({"fragment_2": big, "fragment_4": big})
    assert "archive" not in payload["questions"]["fragment_2"]["criteria"]
    assert choices(payload) == {"fragment_2": "summarize", "fragment_4": "summarize"}


def test_text_agent_observation_follows_its_command() -> None:
    command = {"role": "assistant", "content": "THOUGHT: check.\n\n```bash\nls -la /testbed\n```"}
    observation = {"role": "user", "content": "<returncode>0</returncode>\n<output>\nsetup.py\n</output>"}
    payload = compaction_payload({
        "fragment_3": [command], "fragment_4": [observation],
        "fragment_9": [command], "fragment_10": [observation],
    })
    assert choices(payload) == {"fragment_3": "archive", "fragment_4": "archive",
                                "fragment_9": "keep", "fragment_10": "keep"}


def test_labels_not_offered_are_never_answered() -> None:
    payload = compaction_payload({"fragment_2": tool_unit("ls", "a\n"), "fragment_4": tool_unit("ls", "a\n")})
    payload["questions"]["fragment_2"]["criteria"] = {"summarize": "s", "keep": "k"}
    payload["questions"]["fragment_4"]["criteria"] = {"archive": "a", "summarize": "s"}
    answers = decide(payload["state"], payload["questions"])
    assert answers["fragment_2"]["choice"] == "keep"  # archive was deserved but not offered
    assert answers["fragment_4"]["choice"] == "archive"  # first criterion when keep is not offered
    validate_answers(payload["questions"], {"model": "m", "answers": answers})


def test_unknown_state_gets_conservative_answers() -> None:
    questions = {
        "pick": {"type": "choice", "instructions": "?", "criteria": {"drop": "d", "keep": "k"}},
        "other": {"type": "choice", "instructions": "?", "criteria": {"a": "x", "b": "y"}},
        "rate": {"type": "score", "instructions": "?", "criteria": ["low", "mid", "high"]},
        "flag": {"type": "noul", "instructions": "?"},
    }
    answers = decide("free text state", questions)
    assert answers == {
        "pick": {"type": "choice", "choice": "keep", "confidence": 0.1},
        "other": {"type": "choice", "choice": "a", "confidence": 0.1},
        "rate": {"type": "score", "score": 0, "confidence": 0.1},
        "flag": {"type": "noul", "noul": 0.5, "confidence": 0.1},
    }
    validate_answers(questions, {"model": "m", "answers": answers})


def test_unparseable_evidence_is_kept_with_low_confidence() -> None:
    payload = compaction_payload({"fragment_2": tool_unit("ls", "x" * 3000)})
    payload["state"]["fragments"][0]["evidence"] = "{not json" + "x" * 900
    answer = decide(payload["state"], payload["questions"])["fragment_2"]
    assert answer["choice"] == "keep" and answer["confidence"] <= 0.3


def batches(path: Path) -> list[dict[str, Any]]:
    """Corpus units after the system and first user message, in payloads of 8 fragments; the last
    unit plays the recent evidence."""
    fragments = [(fragment_id, messages) for fragment_id, messages in units(load_messages(path))[2:]
                 if messages[0].get("role") in ("assistant", "user", "tool")]
    candidates, recent = fragments[:-1], [fragments[-1][1]]
    return [compaction_payload(dict(candidates[start:start + 8]), recent=recent)
            for start in range(0, len(candidates), 8)]


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda path: path.stem)
def test_corpus_answers_are_valid_and_cautious(path: Path) -> None:
    seen: set[str] = set()
    for payload in batches(path):
        answers = decide(payload["state"], payload["questions"])
        validate_answers(payload["questions"], {"model": "builtin-rules-decider", "answers": answers})
        assert answers == decide(payload["state"], payload["questions"])  # deterministic
        evidence = {item["id"]: item["evidence"] for item in payload["state"]["fragments"]}
        for fragment_id, answer in answers.items():
            assert answer["choice"] in payload["questions"][fragment_id]["criteria"]
            text = evidence[fragment_id].replace("\\n", "\n")
            if "Traceback (most recent call last)" in text:  # kept when short, else summarized; or superseded
                short = len(evidence[fragment_id]) < ERROR_KEEP_BYTES
                assert answer["choice"] in (("keep", "archive") if short else ("summarize", "archive"))
            seen.add(answer["choice"])
    assert "summarize" in seen and seen <= {"keep", "summarize", "archive"}


def test_corpus_text_agent_repeats_are_archived() -> None:
    archived = 0
    for path in TRANSCRIPTS:
        if "-text_" not in path.name:
            continue
        for payload in batches(path):
            archived += list(choices(payload).values()).count("archive")
    assert archived > 0


def test_later_actions_of_the_state_supersede_across_batches() -> None:
    payload = compaction_payload({"fragment_2": tool_unit("grep -n load src/app.py", "12: def load():")})
    assert choices(payload) == {"fragment_2": "keep"}
    later_call = {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "grep -n load src/app.py"})}}]}
    payload["state"]["later"] = {"names_used_later": ["src/app.py"],
                                 "later_actions": [json.dumps(later_call, separators=(",", ":"))]}
    validate_payload(payload)
    assert choices(payload) == {"fragment_2": "archive"}


def test_the_last_write_of_a_file_mentioned_later_is_kept_and_a_scratch_write_is_not() -> None:
    body = "\n".join(f"def helper_{i}(x):\n    return x + {i}" for i in range(60))
    write = tool_unit(f"cat > src/app.py <<'EOF'\n{body}\nEOF", "")
    scratch = tool_unit(f"cat > scratch.py <<'EOF'\n{body}\nEOF", "")
    payload = compaction_payload({"fragment_2": write, "fragment_4": scratch})
    assert all(payload["questions"][f]["criteria"].keys() == {"keep", "summarize"} for f in payload["questions"])
    payload["state"]["later"] = {"names_used_later": ["src/app.py"]}
    assert choices(payload) == {"fragment_2": "keep", "fragment_4": "summarize"}  # excerpts: header still seen


def test_exit_code_zero_is_success_even_when_the_output_mentions_errors() -> None:
    source = "\n".join(f"    raise ValueError('bad {i}')" for i in range(40))
    assert choices(compaction_payload({"fragment_2": tool_unit("sed -n 1,40p src/a.py", source)})) == {
        "fragment_2": "summarize"}
    long_failure = "Traceback (most recent call last):\n" + "  File x.py, line 1\n" * 120 + "KeyError: 'a'"
    assert choices(compaction_payload({"fragment_2": tool_unit("python x.py", long_failure, 1)})) == {
        "fragment_2": "summarize"}  # bulky error output: summarized, its error lines first
