import json
from pathlib import Path

import pytest

from compactor_cli.main import main
from compactor.transcripts import TranscriptError, parse_transcript

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def test_claude_code_jsonl_becomes_openai_messages_with_paired_tool_results():
    text = (CORPUS / "ccb_claude-opus-4-5_dependeval-java-accountauthenticator.jsonl").read_text()
    messages, fields = parse_transcript(text)
    assert fields == {}
    calls = {c["id"] for m in messages for c in m.get("tool_calls") or []}
    results = [m for m in messages if m["role"] == "tool"]
    assert len(calls) == 2 and {m["tool_call_id"] for m in results} == calls
    assert all(m["role"] in {"user", "assistant", "tool"} for m in messages)


def test_request_body_keeps_only_request_fields():
    messages, fields = parse_transcript(json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                    "keep_recent": 2, "trajectory_format": "x"}))
    assert fields == {"keep_recent": 2} and messages == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("text, message", [
    ("", "empty"), ("42", "expected"), ('{"role": "user", "content": "x"}\nnot json', "line 2"),
    ('{"a": 1}\n{"b": 2}', "line 1"), ("[1]", "message 0"),
])
def test_bad_input_names_the_problem(text, message):
    with pytest.raises(TranscriptError, match=message):
        parse_transcript(text)


def test_text_agents_compact_by_default_and_keep_their_pins(tmp_path, capsys):
    source = CORPUS / "swe-agent-v0-text_gpt-4_pydicom-1458.json"
    default_out, task_out = tmp_path / "default.json", tmp_path / "task.json"
    original = json.loads(source.read_text())
    assert main(["compact", str(source), "--json", "-o", str(default_out)]) == 0
    body = json.loads(default_out.read_text())
    assert "fragment_or_decision_context_limit" not in capsys.readouterr().err
    assert body["compaction"]["output_bytes"] < body["compaction"]["original_bytes"]
    assert body["messages"][:3] == original[:3]  # system prompt, demonstration and task stay byte-identical
    assert main(["compact", str(source), "--pin-task", "--json", "-o", str(task_out)]) == 0
    pinned_task = json.loads(task_out.read_text())
    assert pinned_task["compaction"]["output_bytes"] < pinned_task["compaction"]["original_bytes"]
    assert pinned_task["messages"][:2] == original[:2]


def test_a_jsonl_of_messages_is_written_and_named_as_a_pretty_printed_array(tmp_path, capsys):
    messages = json.loads((CORPUS / "swe-agent-v0-text_gpt-4_pydicom-1458.json").read_text())
    source, out = tmp_path / "messages.jsonl", tmp_path / "out.json"
    source.write_text("".join(json.dumps(message) + "\n" for message in messages))
    assert main(["compact", str(source), "-o", str(out)]) == 0
    written = out.read_text()
    assert isinstance(json.loads(written), list) and written.startswith("[\n  {")  # not JSONL: one array
    assert (f"wrote {out} ({out.stat().st_size} bytes on disk: the messages array as pretty-printed JSON, so "
            "larger than the dense size above)") in capsys.readouterr().err


def test_unreadable_file_is_exit_2(tmp_path, capsys):
    assert main(["compact", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_the_report_explains_and_shows_summaries_beside_originals(tmp_path, capsys):
    source = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
    out = tmp_path / "body.json"
    assert main(["compact", str(source), "--json", "--show-summaries", "2", "-o", str(out)]) == 0
    report = capsys.readouterr().err
    body = json.loads(out.read_text())
    compaction = body["compaction"]
    assert f"compacted: {compaction['original_bytes']} -> {compaction['output_bytes']} bytes" in report
    assert f"the first changed message is {compaction['first_changed_index']}" in report
    assert (f"wrote {out} ({out.stat().st_size} bytes on disk: the /v1/compact response body as pretty-printed "
            "JSON, so larger than the dense size above)") in report
    shown = [line.split()[1] for line in report.splitlines() if line.startswith("--- fragment_")]
    assert len(shown) == 2
    for fragment_id in shown:
        summary, = [m["content"] for m in body["messages"] if m["content"].startswith(f"[Summary of {fragment_id};")]
        assert "\n".join(f"  {line}" for line in summary.splitlines()) in report


def test_a_windowed_run_gets_a_page_of_passes(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tidy the logs."}]
    for i in range(200):  # more candidates than one request takes: compacted in windows
        messages.append({"role": "assistant", "content": f"step {i}: " + "log line with details\n" * 40})
    source, out, page = tmp_path / "t.json", tmp_path / "body.json", tmp_path / "report.html"
    source.write_text(json.dumps(messages))
    assert main(["compact", str(source), "-q", "--json", "-o", str(out), "--html", str(page)]) == 0
    compaction = json.loads(out.read_text())["compaction"]
    html = page.read_text()
    assert html.count('<tr class="pass">') == len(compaction["windows"]["passes"]) > 0
    assert f"{compaction['original_bytes']:,}".replace(",", "\u202f") in html


@pytest.mark.parametrize(("policy", "message"), [
    ('["policy", {"a": 1, "a": 2}]', 'the key "a" appears twice in one object: send each key once'),
    ('["policy", NaN]', "NaN is not JSON"),
    ("[" * 5000 + "]" * 5000, "JSON nested deeper than 128 levels"),
    ("[1", "not JSON: Expecting"),
])
def test_a_policy_argument_is_read_as_the_api_reads_a_body(tmp_path, capsys, policy, message):
    # json.loads kept the last of a key's values, took NaN, and raised RecursionError (a traceback) on deep nesting.
    source = tmp_path / "t.json"
    source.write_text(json.dumps([{"role": "user", "content": "hi"}]))

    with pytest.raises(SystemExit) as exited:
        main(["compact", str(source), "--decision-policy", policy])

    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("keep_recent", [56, 60])
def test_the_context_limit_hint_names_the_tail_that_fills_every_decision_request(tmp_path, capsys, keep_recent):
    # A long tail's excerpts, repeated in every decision request, left no room for a unit (56: 18 units left out,
    # some sent; 60: all 35). The hint said "did not fit a 32 000-byte decision payload; pin fewer messages with
    # --pin or --pin-task", and only when no unit was sent: the tail, the cause here, went unnamed.
    source = CORPUS / "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"
    assert main(["compact", str(source), "--keep-recent", str(keep_recent), "-o", str(tmp_path / "out.json")]) == 0
    report = capsys.readouterr().err
    limits, = [line for line in report.splitlines() if line.startswith("limits: ")]
    left_out = int(limits.split("fragment_or_decision_context_limit x")[1].split(",")[0])
    tail = sum(1 for line in report.splitlines() if line.startswith("fragment_") and line.endswith(" recent_tail"))
    hint, = [line for line in report.splitlines() if line.startswith("hint: ")]
    assert hint == (f"hint: {left_out} units could not be sent even alone: every decision request repeats excerpts of"
                    f" the pinned messages and up to about 1 000 bytes of each of the {tail} units of the recent tail,"
                    " within the decider's 32 000 bytes (fewer for a decider with a small context; a summarizer with"
                    " one holds less of each unit); protect a shorter tail (--keep-recent), pin fewer messages (--pin,"
                    " --pin-task) or use models with a larger context")
