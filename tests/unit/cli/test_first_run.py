"""A new user's mistakes on the command line (README "Command line"): each is one line naming the file or
option and the cause, exit 2 before any model call, never a traceback; and what a first run prints reads
right on an empty or barely shrunk transcript."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from compactor.provider_failures import explain
from compactor.providers import keys
from compactor.providers.base import Offer, ProviderError
from compactor_cli.main import main

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
TRANSCRIPT = CORPUS / "swe-agent-v0-text_gpt-4_pydicom-1458.json"
pytestmark = pytest.mark.usefixtures("bundled_catalog")  # --catalog sets COMPACTOR_CATALOG: dropped after each test

TINY = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
        {"role": "assistant", "content": "done"}]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def no_traceback(err: str) -> bool:
    return "Traceback" not in err and "errors.pydantic.dev" not in err


# -- compactor compact --------------------------------------------------------------------------------


def test_a_file_that_is_not_utf8_is_exit_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "transcript.bin"
    binary.write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')  # Latin-1, not UTF-8
    code, out, err = run(capsys, "compact", str(binary), "-q")
    assert (code, out) == (2, "")
    assert f"{binary}: not UTF-8 text (an invalid byte at offset 33)" in err and no_traceback(err)


def test_stdin_that_is_not_utf8_is_exit_2_naming_stdin(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"[\xff]")))
    code, _, err = run(capsys, "compact", "-", "-q")
    assert code == 2 and "stdin: not UTF-8 text" in err and no_traceback(err)


def test_a_missing_file_and_a_directory_say_so_in_plain_words(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compact", str(tmp_path / "missing.json"), "-q")
    assert code == 2 and err == f"compactor compact: {tmp_path / 'missing.json'}: No such file or directory\n"
    code, _, err = run(capsys, "compact", str(tmp_path), "-q")
    assert code == 2 and err == f"compactor compact: {tmp_path}: Is a directory\n"


def test_a_file_with_a_byte_order_mark_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marked = tmp_path / "notepad.json"
    marked.write_bytes(b"\xef\xbb\xbf" + json.dumps(TINY).encode())
    code, out, err = run(capsys, "compact", str(marked), "-q")
    assert code == 0 and json.loads(out) == TINY, err


@pytest.mark.parametrize("html", ["missing/report.html", "."])
def test_an_unwritable_html_report_is_exit_2_before_compacting(html: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-o", str(out), "--html", str(tmp_path / html))
    assert code == 2 and err.startswith(f"compactor compact: cannot write {tmp_path / html}: ") and no_traceback(err)
    assert "units:" not in err and not out.exists()  # nothing compacted, nothing half-written


def test_output_naming_a_directory_is_exit_2_before_compacting(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-o", str(tmp_path))
    assert code == 2 and err == f"compactor compact: cannot write {tmp_path}: --output names a directory, not a file\n"


def test_an_html_report_failing_at_the_end_still_writes_the_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from compactor_cli import compact_cmd

    out, page = tmp_path / "out.json", tmp_path / "r.html"

    def open_but_the_page(path: str, *args: object, **kwargs: object) -> object:
        if path == str(page):
            raise OSError(28, "No space left on device")
        return open(path, *args, **kwargs)

    monkeypatch.setattr(compact_cmd, "open", open_but_the_page, raising=False)
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-q", "-o", str(out), "--html", str(page))
    assert code == 2 and "cannot write" in err and "No space left on device" in err and no_traceback(err)
    assert json.loads(out.read_text())  # the compaction is not lost


def test_an_invalid_request_is_one_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-q", "--target-ratio", "0")
    assert (code, err) == (2, "compactor compact: invalid request: target_ratio: Input should be greater than 0\n")
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-q", "--format", "anthropic-messages")
    assert code == 2 and "invalid request: messages[0]: role must be 'user' or 'assistant'" in err
    assert no_traceback(err) and "input_value" not in err


def test_an_unknown_option_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["compact", str(TRANSCRIPT), "--frobnicate"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("usage: compactor compact ")
    assert err.endswith("compactor compact: error: unrecognized arguments: --frobnicate\n")


def test_an_empty_transcript_reports_without_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    code, out, err = run(capsys, "compact", str(empty))
    assert (code, json.loads(out)) == (0, [])
    assert "None" not in err and "output bytes by reason: none" in err


def test_a_barely_smaller_result_claims_no_factor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = CORPUS / "ccb_claude-opus-4-5_dependeval-java-accountauthenticator.jsonl"  # 12 477 -> 12 003 bytes
    code, _, err = run(capsys, "compact", str(session), "-o", str(tmp_path / "out.jsonl"))
    line = next(line for line in err.splitlines() if line.startswith("compacted:"))
    assert code == 0 and "% smaller" in line and "1.0x" not in line and "less to send" not in line


# -- compactor eval -----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--methods", "bogus,seal"], "--methods: unknown 'bogus'; one or more of decision, mask, seal"),
    (["--catalog", "/nonexistent/catalog.json"], "catalog /nonexistent/catalog.json: cannot read"),
    (["--html", "/nonexistent/eval.html"], "cannot write /nonexistent/eval.html: directory /nonexistent does not"),
    (["--target-ratio", "5"], "--target-ratio 5.0: must be in (0, 1]"),
])
def test_eval_usage_mistakes_are_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "eval", str(TRANSCRIPT), *argv)
    assert (code, out) == (2, "") and message in err and no_traceback(err)


def test_eval_skips_a_file_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "latin1.json").write_bytes(b"[\xe9]")
    code, _, err = run(capsys, "eval", str(tmp_path))
    assert code == 2 and "latin1.json: not UTF-8 text" in err and "skipped" in err and no_traceback(err)


# -- compactor usage ----------------------------------------------------------------------------------


def test_usage_of_a_ledger_file_that_is_not_there_is_exit_2(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "usage", "--ledger", str(tmp_path / "ledgr.jsonl"))
    assert (code, out) == (2, "") and "ledgr.jsonl: no such file" in err
    code, _, err = run(capsys, "usage", "--ledger", str(tmp_path))
    assert code == 2 and "a directory" in err


@pytest.mark.parametrize("content", [b"hello\n", b'{"a": 1}\n', b"[1]\n", b"\xff\n"])
def test_usage_of_a_file_that_is_no_ledger_is_exit_2(content: bytes, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "transcript.json"
    wrong.write_bytes(content)
    code, _, err = run(capsys, "usage", "--ledger", str(wrong))
    assert code == 2 and f"--ledger {wrong}: not a usage ledger" in err and no_traceback(err)


# -- compactor doctor and a real-provider catalog without its key --------------------------------------


def test_doctor_says_the_offline_offers_run_here(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "doctor")
    assert code == 0 and "(builtin-rules-decider, offline in this process)" in out and "region" not in out


def test_doctor_call_passes_on_the_bundled_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    """The probe asked the offline summarizer for prose it cannot answer: 'builtin refused the request', exit 1."""
    code, out, _ = run(capsys, "doctor", "--call")
    assert (code, out.count("call ok:"), out.count("JSON ok")) == (0, 2, 2), out


def test_an_unset_variable_is_named_when_the_offer_also_has_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/catalogs/*.json give both: locally the variable is the fix, not Secrets Manager's permissions."""
    def no_store(name: str) -> str:
        raise RuntimeError("NoRegionError")

    previous = keys._secret_resolver, keys._cached_secret
    keys.set_secret_resolver(no_store)
    monkeypatch.delenv("FIRST_RUN_KEY", raising=False)
    offer = Offer(id="o", provider="p", family="f", model="m", protocol="chat", transport="openai",
                  base_url="http://127.0.0.1:1/v1", api_key_env="FIRST_RUN_KEY", api_key_secret="compactor/x")
    try:
        with pytest.raises(ProviderError) as caught:
            keys.api_key(offer)
        with pytest.raises(ProviderError) as unnamed:
            keys.api_key(dataclasses.replace(offer, api_key_env=None))  # a secret alone: as before
        assert re.search(r"^API key secret compactor/x cannot be read", unnamed.value.detail)
    finally:
        keys.set_secret_resolver(*previous)
    assert caught.value.kind == "auth_error"
    assert caught.value.detail == ("API key variable FIRST_RUN_KEY is not set and API key secret compactor/x "
                                   "cannot be read (RuntimeError)")
    cause, fix = explain(caught.value.kind, caught.value.detail)
    assert fix.startswith("export FIRST_RUN_KEY=<key> (local), or check the secret exists")


# -- what a first run reads ---------------------------------------------------------------------------


def test_the_mask_and_seal_line_says_which_way_its_percentage_goes(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "--mode", "mask", "-o", str(tmp_path / "out.json"))
    line = next(line for line in err.splitlines() if line.startswith("mask: "))
    assert code == 0 and re.search(r"bytes (\d+) -> (\d+) \(\d+\.\d% of the original, \d+\.\d% smaller\)$", line)


def test_keep_recents_help_tells_decision_modes_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["compact", "--help"])
    assert "fit in 30% of the target" in " ".join(capsys.readouterr().out.split())


def test_output_dash_is_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "tiny.json"
    source.write_text(json.dumps(TINY))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "compact", str(source), "-q", "-o", "-")
    assert code == 0 and json.loads(out) == TINY and not (tmp_path / "-").exists()


def test_the_readmes_command_line_names_every_option() -> None:
    """README "Command line" is the synopsis a new user reads: every option of every subcommand is in it."""
    from compactor_cli.main import build_parser

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Command line"):]
    start = section.index("```sh\n") + 6
    synopsis = section[start:section.index("\n```", start)]
    subparsers = next(action for action in build_parser()._actions if action.dest == "command").choices
    missing = {name: [option for action in parser._actions for option in action.option_strings
                      if option.startswith("--") and option != "--help"
                      and not re.search(rf"compactor {name} [^\n]*(\n +[^\n]*)*{re.escape(option)}\b", synopsis)]
               for name, parser in subparsers.items()}
    assert {name: options for name, options in missing.items() if options} == {}


def test_a_utf16_file_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PowerShell 5's `>` writes UTF-16 with a byte order mark: the one fix is to save it as UTF-8."""
    utf16 = tmp_path / "powershell.json"
    utf16.write_bytes(json.dumps(TINY).encode("utf-16"))
    code, _, err = run(capsys, "compact", str(utf16), "-q")
    assert (code, err) == (2, f"compactor compact: {utf16}: UTF-16 text (what PowerShell's > writes); save it as UTF-8\n")


# -- interrupted and failed runs leave --output as it was ------------------------------------------------


def test_ctrl_c_is_one_line_exit_130_and_the_output_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from compactor_cli import compact_cmd

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(compact_cmd, "compact_locally", interrupted)
    monkeypatch.setattr(logging.getLogger("asyncio"), "disabled", False)  # main() silences it: restored after
    out = tmp_path / "out.json"
    out.write_text("the previous result")
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-o", str(out))
    assert (code, err) == (130, "compactor compact: interrupted\n")
    assert out.read_text() == "the previous result"


def test_a_streamed_run_that_fails_leaves_the_output_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The streamed path (files over 32 MiB) opened --output at the start: it truncated a previous result and
    left half a JSON array when a window failed or Ctrl-C came."""
    from compactor.compaction import windowed
    from compactor.errors import InvalidRequest
    from compactor_cli import compact_cmd

    async def fails_midway(source: object, settings: object, *, out: Any, **kwargs: object) -> None:
        out.write('[\n{"role": "system", "content": "half')
        raise InvalidRequest("a window failed")

    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 0)  # stream this small file
    monkeypatch.setattr(windowed, "compact_stream", fails_midway)
    out = tmp_path / "out.json"
    out.write_text("the previous result")
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-q", "-o", str(out))
    assert code == 1 and "HTTP 400: " in err and "a window failed" in err  # answered as the API would (README)
    assert out.read_text() == "the previous result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no partial file left beside it


def test_a_streamed_run_writes_its_output_when_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from compactor_cli import compact_cmd

    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 0)
    out = tmp_path / "out.json"
    code, _, err = run(capsys, "compact", str(TRANSCRIPT), "-o", str(out))
    assert code == 0 and "one dense message per line" in err
    assert json.loads(out.read_text()) and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
