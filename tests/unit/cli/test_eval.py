import json
from pathlib import Path

import pytest

from compactor.jsonutil import dense_size
from compactor_cli.evaluation import Item, changed_indexes, evidence, haystack, trim
from compactor_cli.main import main

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def _call(call_id, command):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def _result(call_id, text):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


TRANSCRIPT = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Fix the bug."},
    _call("a", "python run_tests.py"),
    _result("a", "<returncode>1</returncode>\nTraceback (most recent call last):\n  File \"src/app/core.py\", line 3\n"
                 "ValueError: bad parse_header value\n"),
    _call("b", "cat > src/app/core.py <<'EOF'\ndef parse_header(x):\n    return x\nEOF"),
    _result("b", "<returncode>0</returncode>\n"),
    {"role": "assistant", "content": "Now parse_header in src/app/core.py returns its input."},
]


def test_changed_indexes_follow_the_output_in_order():
    output = [TRANSCRIPT[0], TRANSCRIPT[1], {"role": "assistant", "content": "summary"}, *TRANSCRIPT[4:]]
    assert changed_indexes(TRANSCRIPT, output) == [2, 3]
    assert changed_indexes(TRANSCRIPT, TRANSCRIPT) == []
    assert changed_indexes(TRANSCRIPT, []) == list(range(len(TRANSCRIPT)))


def test_evidence_items_of_changed_messages():
    items = evidence(TRANSCRIPT, [2, 3, 4, 5]).items
    by_kind = {(i.kind, i.probe, i.exit_code) for i in items}
    assert ("error", "ValueError: bad parse_header value", None) in by_kind
    assert ("error", "Traceback (most recent call last):", None) in by_kind
    assert ("command", "python run_tests.py", 1) in by_kind
    assert ("path", "src/app/core.py", None) in by_kind
    assert ("identifier", "parse_header", None) in by_kind
    assert ("file", "def parse_header(x): return x", None) in by_kind
    # nothing changed: nothing to lose
    assert evidence(TRANSCRIPT, []).items == []


def test_evidence_is_kept_only_when_findable_in_the_output():
    changed = [2, 3, 4, 5]
    dropped = [*TRANSCRIPT[:2], TRANSCRIPT[6]]
    summary = {"role": "assistant", "content": "$ python run_tests.py (exit 1)\nValueError: bad parse_header value"}
    kept_dropped, total, _ = evidence(TRANSCRIPT, changed).score(dropped)
    kept_summary, _, kinds = evidence(TRANSCRIPT, changed).score([*TRANSCRIPT[:2], summary, TRANSCRIPT[6]])
    assert total >= 6 and kept_dropped < kept_summary < 1.0
    assert kinds["command"] == [1, 2] and kinds["file"] == [0, 1]
    assert evidence(TRANSCRIPT, changed).score(TRANSCRIPT)[0] == 1.0


def test_command_needs_its_exit_code_nearby():
    hay = haystack([{"role": "assistant", "content": "$ make test (exit 2)"}])
    assert Item("command", "make test", 2).kept(hay)
    assert not Item("command", "make test", 0).kept(hay)


def test_trim_keeps_the_head_and_whole_tool_units():
    target = dense_size([*TRANSCRIPT[:2], *TRANSCRIPT[4:]])
    out = trim(TRANSCRIPT, target)
    assert out == [*TRANSCRIPT[:2], *TRANSCRIPT[4:]]
    assert trim(TRANSCRIPT, dense_size(TRANSCRIPT)) == TRANSCRIPT
    assert trim(TRANSCRIPT, 0) == [*TRANSCRIPT[:2], TRANSCRIPT[-1]]


def test_eval_command_prints_every_method_and_trim_at_decision_bytes(capsys):
    source = CORPUS / "msa-v2-toolcalls_deepseek-reasoner_pvlib-1707_apierror.json"
    assert main(["eval", "--json", str(source)]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["method"]: row for row in report["rows"]}
    assert {"decision", "seal", "trim", "mask"} <= set(rows)
    assert rows["trim"]["output_bytes"] <= rows["decision"]["output_bytes"]
    assert rows["decision"]["model_calls"] > 0 and rows["decision"]["evidence_items"] > 0
    assert main(["eval", str(source)]) == 0
    assert "decision keeps" in capsys.readouterr().out


def test_lost_items_say_what_and_where_from():
    changed = [2, 3, 4, 5]
    summary = {"role": "assistant", "content": "$ python run_tests.py (exit 1)\nValueError: bad parse_header value"}
    found = evidence(TRANSCRIPT, changed)
    lost = found.lost([*TRANSCRIPT[:2], summary, TRANSCRIPT[6]])
    assert {(i.kind, i.probe, i.source) for i in lost} >= {
        ("error", "Traceback (most recent call last):", 3), ("file", "def parse_header(x): return x", 4)}
    assert not any(i.kind == "command" and i.probe == "python run_tests.py" for i in lost)
    kept, total, _ = found.score([*TRANSCRIPT[:2], summary, TRANSCRIPT[6]])
    assert len(lost) == total - round(kept * total)
    assert found.lost(TRANSCRIPT) == []


def test_eval_lost_lists_each_lost_item_per_transcript(capsys):
    source = CORPUS / "msa-v2-toolcalls_deepseek-reasoner_pvlib-1707_apierror.json"
    assert main(["eval", "--json", "--methods", "decision", str(source)]) == 0
    rows = {row["method"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    for row in rows.values():  # the JSON rows name their lost items too
        items = row["evidence_items"]
        assert len(row["lost"]) == items - round(row["evidence_kept"] * items)
    assert main(["eval", "--methods", "decision", "--lost", "decision,trim", str(source)]) == 0
    out = capsys.readouterr().out
    for method in ("decision", "trim"):
        row = rows[method]
        assert f"{source.stem}  {method}: {len(row['lost'])} of {row['evidence_items']} items lost" in out
        for item in row["lost"]:
            assert f"message {item['message']:>4}" in out
    assert main(["eval", "--methods", "seal", "--lost", "trim", str(source)]) == 2
    assert "--lost: 'trim' not among the methods run" in capsys.readouterr().err


def test_eval_lost_before_the_paths_lists_decisions_items(tmp_path, capsys):
    # `compactor eval --lost DIR` (docs/evaluation.md's example) gave the path to --lost as its methods and exited 2,
    # "the following arguments are required: FILE|DIR"; a word that names no method and no path is still refused.
    source = CORPUS / "msa-v2-toolcalls_deepseek-reasoner_pvlib-1707_apierror.json"
    (tmp_path / source.name).write_bytes(source.read_bytes())
    for named in (tmp_path, tmp_path / source.name):
        assert main(["eval", "--lost", str(named)]) == 0
        out = capsys.readouterr().out
        assert f"{source.stem}  decision: " in out and f"{source.stem}  trim: " not in out, out
    assert main(["eval", "--lost", "decison", str(source)]) == 2
    assert "--lost: 'decison' not among the methods run" in capsys.readouterr().err
    assert main(["eval", "--lost"]) == 2
    assert "name at least one transcript FILE or DIR" in capsys.readouterr().err


def test_eval_skips_what_is_not_a_transcript(tmp_path, capsys):
    (tmp_path / "notes.json").write_text("42")
    assert main(["eval", str(tmp_path)]) == 2
    assert "skipped" in capsys.readouterr().err


def test_eval_names_the_subfolders_it_does_not_read(tmp_path, capsys):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "sub" / "deeper" / "t.jsonl").write_text("42")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("not a transcript")
    assert main(["eval", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'sub'}: a subfolder: not read" in err
    assert "notes" not in err


@pytest.mark.usefixtures("bundled_catalog")  # the cached catalog and router dropped before and after
def test_eval_says_when_model_calls_fell_back(tmp_path, monkeypatch, capsys):
    # A catalog whose offers cannot be reached: every model call falls back and decision mode keeps the
    # transcript. The rows must say so, or the table reads as a measurement of the models.
    offer = {"provider": "local", "family": "m", "model": "m", "base_url": "http://127.0.0.1:1/v1",
             "price_in": 0, "price_out": 0, "context": 32000, "supports_json_mode": True}
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"offers": [
        {**offer, "id": "local/decider", "protocol": "decisions", "transport": "chat-decisions"},
        {**offer, "id": "local/summarizer", "protocol": "chat", "transport": "openai"}]}))
    monkeypatch.setenv("COMPACTOR_CATALOG", str(catalog))  # eval sets it; monkeypatch restores it
    source = CORPUS / "msa-v2-toolcalls_deepseek-reasoner_pvlib-1707_apierror.json"

    assert main(["eval", "--json", "--methods", "decision,seal", "--catalog", str(catalog), str(source)]) == 0

    rows = {row["method"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["decision"]["output_bytes"] == rows["decision"]["input_bytes"]
    for method in ("decision", "seal"):
        assert "fell back" in rows[method]["note"] and "127.0.0.1" in rows[method]["note"], rows[method]["note"]
    assert main(["eval", "--methods", "decision", "--catalog", str(catalog), str(source)]) == 0
    assert "fell back" in capsys.readouterr().out


@pytest.mark.usefixtures("bundled_catalog")
def test_a_transcript_named_in_bytes_that_are_not_utf8_is_evaluated_and_plotted(tmp_path, capsys):
    # Its name reached the page and the table as lone surrogates: writing the page raised UnicodeEncodeError.
    import os

    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / os.fsdecode(b"run-\xff.json")).write_bytes(
        (CORPUS / "msa-v2-toolcalls_deepseek-reasoner_pvlib-1707_apierror.json").read_bytes())
    page = tmp_path / "eval.html"

    assert main(["eval", str(folder), "--methods", "mask", "--html", str(page)]) == 0

    assert "run-\\xff" in page.read_text(encoding="utf-8") and "run-\\xff" in capsys.readouterr().out
