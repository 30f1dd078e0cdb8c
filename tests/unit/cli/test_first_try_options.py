"""What a first local try of the README's commands hit: each mistake is one line naming the option and the
cause, with the exit code the README and docs/billing.md give, never a traceback or a silent wrong result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor_cli import serve
from compactor_cli.main import main

REPO = Path(__file__).resolve().parents[3]
TRANSCRIPT = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
pytestmark = pytest.mark.usefixtures("bundled_catalog")  # --catalog sets COMPACTOR_CATALOG: dropped after each test


def exit_of(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return int(exited.value.code or 0)


def test_a_negative_show_summaries_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--show-summaries -2`` printed every summary but the last two (a slice from the end), exit 0."""
    assert exit_of(["compact", str(TRANSCRIPT), "--show-summaries", "-2"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("compactor compact: error: argument --show-summaries: must be at least 0, not -2\n")
    assert "--- fragment_" not in err


@pytest.mark.parametrize(("argv", "message"), [
    (["--port", "99999"], "argument --port: must be 0 to 65535, not 99999"),
    (["--port", "-1"], "argument --port: must be 0 to 65535, not -1"),
    (["--workers", "four"], "argument --workers: not a whole number: 'four'"),
])
def test_a_port_out_of_range_or_a_word_is_a_usage_error(argv: list[str], message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--port 99999`` was an ``OverflowError`` traceback from the socket, exit 1; a word for ``--workers`` said
    ``invalid _positive value``."""
    assert exit_of(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"compactor serve: error: {message}\n") and "Traceback" not in err


def test_serve_refuses_a_ledger_that_is_a_directory_or_another_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A directory started a server whose every billed call answered 500; a README (or a transcript) named by
    mistake had an entry appended to it for each call."""
    monkeypatch.setattr(serve, "create_server", lambda *a, **k: pytest.fail("started a server"))
    monkeypatch.setattr(serve, "default_template", lambda: tmp_path / "no-template.yaml")
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n\nnot a ledger\n")
    file_as_folder = tmp_path / "notes.md" / "ledger.jsonl"

    assert main(["serve", "--port", "0", "--ledger", str(tmp_path)]) == 2
    assert f"compactor serve: --ledger {tmp_path}: a directory, not a ledger file\n" in capsys.readouterr().err
    assert main(["serve", "--port", "0", "--ledger", str(notes)]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"compactor serve: --ledger {notes}: not a usage ledger (no line of it is an entry)\n")
    assert not [record for record in caplog.records if "is no entry" in record.getMessage()]  # the line says it
    assert notes.read_text() == "# my notes\n\nnot a ledger\n"
    assert main(["serve", "--port", "0", "--ledger", str(file_as_folder)]) == 2
    assert f"cannot be created: {notes} is not a directory" in capsys.readouterr().err


def test_serve_takes_a_new_ledger_file_or_one_that_holds_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.billing import LocalLedger
    from compactor_aws.ledger import LEDGER_FILE_ENV
    from tests.billing.test_ledger import entry

    started: list[str] = []

    def fake_server(*args: object, **kwargs: object) -> object:
        started.append(str(args[4][LEDGER_FILE_ENV]))  # type: ignore[index]
        raise OSError(98, "Address already in use")  # stop right after, as a taken port does

    monkeypatch.setattr(serve, "create_server", fake_server)
    monkeypatch.setattr(serve, "default_template", lambda: tmp_path / "no-template.yaml")
    LocalLedger(path=tmp_path / "old.jsonl").record(entry("a"))
    for ledger in (tmp_path / "old.jsonl", tmp_path / "new" / "ledger.jsonl"):
        assert main(["serve", "--port", "0", "--ledger", str(ledger)]) == 2
        assert "cannot listen" in capsys.readouterr().err
    assert started == [str(tmp_path / "old.jsonl"), str(tmp_path / "new" / "ledger.jsonl")]


def test_usage_of_a_file_that_is_no_ledger_is_one_line(caplog: pytest.LogCaptureFixture,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """It was a warning for every line of the file (600 for the README), then the line that says so."""
    readme = REPO / "README.md"
    assert main(["usage", "--ledger", str(readme)]) == 2
    assert capsys.readouterr().err == (f"compactor usage: --ledger {readme}: not a usage ledger "
                                       "(no line of it is an entry)\n")
    assert not [record for record in caplog.records if "is no entry" in record.getMessage()]


def test_usage_of_a_table_without_a_region_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``compactor usage --table T`` from a shell without an AWS region (or credentials, or the table) was
    botocore's traceback, exit 1."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_DYNAMODB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    from compactor_aws import aws_session, ledger

    def fresh() -> None:  # the container's session and client, made again under this environment (and after it)
        aws_session.SESSION.reset()
        ledger.reset_client()

    fresh()
    try:
        assert main(["usage", "--table", "UsageTable"]) == 1
    finally:
        fresh()
    err = capsys.readouterr().err
    assert err == "compactor usage: table UsageTable cannot be read: You must specify a region.\n"


def test_a_catalog_that_is_no_object_is_said_without_a_class_name(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A catalog holding a JSON array said ``Input should be a valid dictionary or instance of CatalogSpec``."""
    catalog = tmp_path / "catalog.json"
    for data, where in (([], ""), ({"offers": [1]}, "offers.0: ")):
        catalog.write_text(json.dumps(data))
        assert main(["doctor", "--catalog", str(catalog)]) == 2
        err = capsys.readouterr().err
        assert err == f"compactor doctor: catalog {catalog}: {where}Input should be a JSON object\n"
        assert "Spec" not in err


def test_a_missing_template_names_the_cause_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It read ``cannot read x.yaml: [Errno 2] No such file or directory: 'x.yaml'``."""
    missing = tmp_path / "x.yaml"
    assert main(["invoke", "CompactFunction", "-e", str(REPO / "tests" / "events" / "healthz.json"),
                 "-t", str(missing)]) == 2
    assert capsys.readouterr().err == f"compactor invoke: cannot read {missing}: No such file or directory\n"


@pytest.mark.parametrize(("content", "problem"), [
    (b"Resources:\n  A: {Type: x\n  B: 1\n",
     "line 3, column 4: expected ',' or '}', but got ':' (while parsing a flow mapping at line 2, column 6)"),
    (b"Resources:\n\tA: 1\n", "line 2, column 1: found character '\\t' that cannot start any token "
                                "(while scanning for the next token)"),
    (b"Resources: \xff\n", "not UTF-8 text (byte 11)"),
])
@pytest.mark.parametrize("command", ["invoke", "serve"])
def test_a_template_that_is_no_yaml_is_one_line_naming_file_line_and_column(
        command: str, content: bytes, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A YAML syntax error was PyYAML's four lines naming the file twice; a byte that is not UTF-8 a traceback."""
    monkeypatch.setattr(serve, "create_server", lambda *a, **k: pytest.fail("started a server"))
    template = tmp_path / "template.yaml"
    template.write_bytes(content)
    argv = (["invoke", "CompactFunction", "-e", str(REPO / "tests" / "events" / "healthz.json")]
            if command == "invoke" else ["serve", "--port", "0"])
    assert main([*argv, "-t", str(template)]) == 2
    assert capsys.readouterr().err == f"compactor {command}: cannot read {template}: {problem}\n"


@pytest.mark.parametrize(("content", "problem"), [
    (None, "cannot read (No such file or directory)"),
    ("[]", "Input should be a JSON object"),
])
def test_serve_refuses_a_catalog_it_cannot_load(content: str | None, problem: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``COMPACTOR_CATALOG=my-catalog.json compactor serve`` (README) with a mistyped or invalid file started a
    server that answered every compaction 500 ``internal server error``, naming nothing (only healthz said why)."""
    monkeypatch.setattr(serve, "create_server", lambda *a, **k: pytest.fail("started a server"))
    monkeypatch.setattr(serve, "default_template", lambda: tmp_path / "no-template.yaml")
    catalog = tmp_path / "my-catalog.json"
    if content is not None:
        catalog.write_text(content)
    monkeypatch.setenv("COMPACTOR_CATALOG", str(catalog))
    assert main(["serve", "--port", "0"]) == 2
    assert capsys.readouterr().err.endswith(f"compactor serve: COMPACTOR_CATALOG: catalog {catalog}: {problem}\n")
