"""A streamed run (files over 32 MiB, docs/scale.md "`compactor compact` on large files") that fails leaves no part
of a document: not in ``--output`` (written beside it, renamed when done) and not on stdout, which it wrote as it
went: a file found changed during the result's last reading, a refusal, a full disk or Ctrl-C left a truncated JSON
array on stdout (``compactor compact big.json > out.json``) with a non-zero exit. Stdout that cannot be written is
one line and exit 2 (it was a traceback, exit 1). Its refusals name the file, as a file read whole names them."""

from __future__ import annotations

import errno
import io
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from compactor.errors import InvalidRequest
from compactor.transcripts import TranscriptError
from compactor_cli import compact_cmd
from compactor_cli.main import main

pytestmark = pytest.mark.usefixtures("bundled_catalog")

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
            *({"role": "assistant", "content": f"step {i}"} for i in range(20))]
CHANGED = "changed while it was compacted (it is read several times): run again once nothing writes it"


@pytest.fixture
def streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small transcript the CLI streams, its temporary files under a directory of the test's (checked empty)."""
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", 0)
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    source = tmp_path / "big.json"
    source.write_text(json.dumps(MESSAGES))
    return source


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def left(tmp_path: Path) -> list[str]:
    return sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))


def test_a_streamed_run_writes_the_whole_document_to_stdout(streamed: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "compact", str(streamed), "-q")
    assert (code, err) == (0, "") and json.loads(out) == MESSAGES
    code, out, _ = run(capsys, "compact", str(streamed), "-q", "--json")
    assert code == 0 and json.loads(out)["messages"] == MESSAGES
    assert left(tmp_path) == ["big.json", "tmp"]  # the pass outputs and the spooled result removed


@pytest.mark.parametrize("output", [False, True], ids=["stdout", "--output"])
def test_a_file_changed_during_the_results_reading_leaves_no_output(streamed: Path, tmp_path: Path, output: bool,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """No pass changed this transcript, so the result is the file read again: it is written to while that
    reading goes on. stdout had the array's first messages, no closing bracket, and exit 2."""
    from compactor.compaction import windowed

    write_body = windowed.write_body

    def written_to_meanwhile(out: Any, messages: Any, summary: Any, **kwargs: Any) -> None:
        def reading() -> Any:
            for index, message in enumerate(messages):
                yield message
                if index == 2:
                    with streamed.open("a") as handle:
                        handle.write(" ")
        write_body(out, reading(), summary, **kwargs)

    monkeypatch.setattr(windowed, "write_body", written_to_meanwhile)
    target = tmp_path / "out.json"
    target.write_text("the previous result")
    code, out, err = run(capsys, "compact", str(streamed), "-q", *(["-o", str(target)] if output else []))
    assert (code, out) == (2, "")
    assert err == f"compactor compact: {streamed}: {CHANGED}\n"  # the file named once, as every refusal names it
    assert target.read_text() == "the previous result"
    assert left(tmp_path) == ["big.json", "out.json", "tmp"]


FAILURES = {
    "refused late": (TranscriptError("message 9: not JSON"), 2, "{source}: message 9: not JSON"),
    "answered": (InvalidRequest("a window failed"), 1, "HTTP 400: "),
    "disk full": (OSError(errno.ENOSPC, "No space left on device"), 2, "cannot write {where}: No space left on device"),
    "Ctrl-C": (KeyboardInterrupt(), 130, "interrupted"),
}


@pytest.mark.parametrize("output", [False, True], ids=["stdout", "--output"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_streamed_run_failing_midway_leaves_no_output(streamed: Path, tmp_path: Path, failure: str, output: bool,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.compaction import windowed

    error, exit_code, said = FAILURES[failure]

    async def fails_midway(source: object, settings: object, *, out: Any, **kwargs: object) -> None:
        out.write('[\n{"role":"system","content":"s"},\n{"role":"user","content":"ta')
        raise error

    monkeypatch.setattr(windowed, "compact_stream", fails_midway)
    monkeypatch.setattr(logging.getLogger("asyncio"), "disabled", False)  # main() silences it on Ctrl-C: restored
    target = tmp_path / "out.json"
    target.write_text("the previous result")
    code, out, err = run(capsys, "compact", str(streamed), "-q", *(["-o", str(target)] if output else []))
    where = target if output else f"a temporary file in {tmp_path / 'tmp'}"
    assert (code, out) == (exit_code, "")
    assert said.format(source=streamed, where=where) in err and "Traceback" not in err
    assert target.read_text() == "the previous result"
    assert left(tmp_path) == ["big.json", "out.json", "tmp"]


class FullDisk(io.TextIOBase):
    """stdout redirected to a full disk (``> /dev/full``)."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("stream_bytes", [10**9, 0], ids=["read whole", "streamed"])
def test_stdout_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path, stream_bytes: int,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """It was a traceback and exit 1 (the code of a request answered with an error) read whole, and named the input
    file as what could not be written streamed."""
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
    source = tmp_path / "t.json"
    source.write_text(json.dumps(MESSAGES))
    monkeypatch.setattr(sys, "stdout", FullDisk())
    code = main(["compact", str(source), "-q"])
    assert (code, capsys.readouterr().err) == (2, "compactor compact: cannot write stdout: No space left on device\n")


def test_a_refusal_met_past_the_first_message_names_the_file_as_a_whole_read_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The streamed run's first reading reads the first message; what the scan met after it was said without the
    file's name ("compactor compact: not JSON: ...")."""
    source = tmp_path / "bad.json"
    source.write_text('[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"} oops]')
    for stream_bytes in (10**9, 0):  # read whole, then streamed
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
        code, out, err = run(capsys, "compact", str(source), "-q")
        assert (code, out) == (2, "") and err.startswith(f"compactor compact: {source}: ") and "not JSON" in err


def test_a_file_gone_before_the_streamed_reading_opens_it_is_named_as_a_whole_read_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Removed after its size was read: the streamed reading said "[Errno 2] No such file or directory: '<path>'"
    after the path."""
    missing = tmp_path / "gone.json"
    for stream_bytes in (10**9, -1):  # read whole, then streamed (a missing file's size reads as 0)
        monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
        assert run(capsys, "compact", str(missing), "-q") == (
            2, "", f"compactor compact: {missing}: No such file or directory\n")


class NotStopped(Exception):
    """SIGTERM reached the test's own handler: the run had none of its own (the process would have died)."""


@pytest.mark.parametrize("output", [False, True], ids=["stdout", "--output"])
def test_sigterm_stops_a_run_as_ctrl_c_does(streamed: Path, tmp_path: Path, output: bool,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`timeout`, `kill` or a cancelled job send SIGTERM, which killed the process at once: `--output`'s hidden
    `.out.json.<pid>.partial` and the pass outputs (`pass-*.json`, the size of a pass) were left beside it."""
    import os
    import signal

    from compactor.compaction import windowed

    async def terminated_midway(source: object, settings: object, *, out: Any, workdir: str | None,
                                **kwargs: object) -> None:
        out.write('[\n{"role":"system","content":"s"},\n{"role":"user","content":"ta')
        pass_output = Path(workdir or tempfile.gettempdir()) / "pass-x.json"
        try:
            pass_output.write_text("[")
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between two bytecodes
                pass
        finally:
            pass_output.unlink()

    def not_stopped(signum: int, frame: object) -> None:
        raise NotStopped

    monkeypatch.setattr(windowed, "compact_stream", terminated_midway)
    monkeypatch.setattr(logging.getLogger("asyncio"), "disabled", False)  # main() silences it: restored after
    previous = signal.signal(signal.SIGTERM, not_stopped)
    try:
        target = tmp_path / "out.json"
        target.write_text("the previous result")
        code, out, err = run(capsys, "compact", str(streamed), "-q", *(["-o", str(target)] if output else []))
        assert (code, out, err) == (130, "", "compactor compact: interrupted\n")
        assert target.read_text() == "the previous result"
        assert left(tmp_path) == ["big.json", "out.json", "tmp"]
        assert signal.getsignal(signal.SIGTERM) is not_stopped  # the run's handler is gone with it
    finally:
        signal.signal(signal.SIGTERM, previous)


REPO = Path(__file__).resolve().parents[3]
# Assistant messages alone: mask mode changes nothing, so the result is larger than a pipe holds (64 KiB).
LARGE = [{"role": "user", "content": "task"}, *({"role": "assistant", "content": f"step {i} " + "x" * 900}
                                                 for i in range(400))]
PIPED = """
import sys
from compactor_cli import compact_cmd
from compactor_cli.main import main
compact_cmd.STREAM_BYTES = {stream_bytes}
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize("stream_bytes", [10**9, 0], ids=["read whole", "streamed"])
def test_a_pipe_closed_by_its_reader_is_a_quiet_exit_141(tmp_path: Path, stream_bytes: int) -> None:
    """``compactor compact big.json | head -c 10``: Python's stdout took the result's write, saw the reader leave after
    the pipe's 64 KiB and returned, the rest dropped without an error: the output was cut mid-JSON with exit 0. Now
    the command exits as ``cat`` and ``yes`` do there: 141 (128 + SIGPIPE), nothing on stderr."""
    import os
    import subprocess

    source = tmp_path / "large.json"
    source.write_text(json.dumps(LARGE))
    # Read whole, mask mode; streamed (decision mode only), a target the transcript meets: nothing changes either way.
    argv = ["compact", str(source), "-q", *(["--mode", "mask"] if stream_bytes else ["--target-ratio", "1"])]
    env = {**{key: value for key, value in os.environ.items() if key != "COMPACTOR_CATALOG"},
           "PYTHONPATH": os.pathsep.join([str(REPO / "layers" / "compactor"), str(REPO / "cli")])}
    process = subprocess.Popen([sys.executable, "-c", PIPED.format(stream_bytes=stream_bytes, argv=argv)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert process.stdout is not None and process.stderr is not None
    head = process.stdout.read(10)
    process.stdout.close()  # the reader leaves while the command is writing
    err = process.stderr.read()
    assert (process.wait(timeout=120), err) == (141, b"")
    assert head.startswith(b"[")


@pytest.mark.parametrize("stream_bytes", [10**9, 0], ids=["read whole", "streamed"])
def test_stdout_closed_is_exit_141_without_a_word_and_ctrl_c_during_the_copy_is_130(
        tmp_path: Path, stream_bytes: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(compact_cmd, "STREAM_BYTES", stream_bytes)
    source = tmp_path / "t.json"
    source.write_text(json.dumps(MESSAGES))

    class Closed(FullDisk):
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    class Interrupted(FullDisk):
        def write(self, text: str) -> int:
            raise KeyboardInterrupt

    monkeypatch.setattr(sys, "stdout", Closed())
    assert (main(["compact", str(source), "-q"]), capsys.readouterr().err) == (141, "")
    monkeypatch.setattr(sys, "stdout", Interrupted())
    assert (main(["compact", str(source), "-q"]), capsys.readouterr().err) == (130, "compactor compact: interrupted\n")
