"""The command line's files: reading a transcript's text and checking where a result will be written, each
problem in a line a person can act on (the commands exit 2 with it, before any model call)."""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

BOM = "\ufeff"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # little- and big-endian byte order marks


class InputError(Exception):
    """A file (or stdin) that cannot be read as text: its message names the file and the cause."""


def os_cause(exc: OSError) -> str:
    """``No such file or directory``, ``Is a directory`` …: the OS's words without its ``[Errno N]`` and the
    path the caller names already."""
    return exc.strerror or str(exc)


def display_name(path: str) -> str:
    """How messages name ``path``: ``stdin`` for ``-``."""
    return "stdin" if path == "-" else path


def read_text(path: str) -> str:
    """The UTF-8 text of ``path`` (``-``: stdin) with its line endings as they are (a session file's untouched
    lines are written back byte for byte, CRLF included), a leading byte order mark dropped (editors on
    Windows write one; JSON has none)."""
    try:
        if path == "-":
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            with open(path, encoding="utf-8", newline="") as handle:
                text = handle.read()
    except UnicodeDecodeError as exc:
        utf16 = exc.start == 0 and exc.object[:2] in UTF16_BOMS
        cause = ("UTF-16 text (what PowerShell's > writes); save it as UTF-8" if utf16
                 else f"not UTF-8 text (an invalid byte at offset {exc.start})")
        raise InputError(f"{display_name(path)}: {cause}") from None
    except OSError as exc:
        raise InputError(f"{display_name(path)}: {os_cause(exc)}") from None
    return text.removeprefix(BOM)


def unwritable(path: str, what: str) -> str | None:
    """Why ``path`` cannot be written (its directory missing, or a directory itself), or None; ``what``
    names the option in the message (``--output``, ``--html``)."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"cannot write {path}: directory {parent} does not exist"
    if os.path.isdir(path):
        return f"cannot write {path}: {what} names a directory, not a file"
    return None


@contextlib.contextmanager
def replaced_when_done(path: str) -> Iterator[TextIO]:
    """A text file that becomes ``path`` only when the block ends without an error: it is written beside it
    under a hidden name and renamed over it, so an interrupted or failed run leaves ``path`` as it was (before,
    a streamed run truncated it at the start and left what it had written when it failed)."""
    target = os.path.realpath(path)  # through a symbolic link, as writing to it did
    partial = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.partial")
    try:
        with open(partial, "w", encoding="utf-8", newline="") as handle:
            yield handle
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


class StdoutError(Exception):
    """stdout could not be written (a full disk …): its message is the OS's words for it."""


class StdoutClosed(StdoutError):
    """stdout is a pipe nobody reads any more (``compactor compact big.json | head -c 10``): the command exits quietly
    with :data:`BROKEN_PIPE_EXIT`, as ``cat`` and ``yes`` end in such a pipe (README, "Command line")."""


BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a command a closed pipe stopped (`yes | head`)
COPY_BYTES = 1 << 20


def write_stdout(chunks: Iterable[str]) -> None:
    """Writes ``chunks`` to stdout whole, or raises: :class:`StdoutClosed` when its reader has gone, else
    :class:`StdoutError` (what was left unwritten is then dropped, so the interpreter's exit does not try again: a
    traceback, exit 1, or a second message and exit 120). To stdout's descriptor, a write at a time until every byte
    is taken: Python's buffered stdout took a write of more than a pipe holds, saw the reader leave midway (``| head -c
    10``) and returned, the rest dropped without an error, so the output was cut mid-JSON with exit 0. A stdout with
    no descriptor (a test's) is written as text."""
    try:
        try:
            sys.stdout.flush()  # what was written through it before goes first
            descriptor = sys.stdout.fileno()
        except (AttributeError, ValueError, io.UnsupportedOperation):  # no descriptor
            descriptor = None
        if descriptor is None:
            for chunk in chunks:
                sys.stdout.write(chunk)
            sys.stdout.flush()
            return
        encoding, errors = sys.stdout.encoding, sys.stdout.errors
        for chunk in chunks:
            data = memoryview(chunk.encode(encoding, errors))
            while data:
                data = data[os.write(descriptor, data):]
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # stdout with no descriptor (a test's)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # the exit's flush writes what is left there
            os.close(devnull)
        if isinstance(exc, BrokenPipeError):
            raise StdoutClosed(os_cause(exc)) from None
        raise StdoutError(os_cause(exc)) from None


@contextlib.contextmanager
def written_when_done(path: str | None) -> Iterator[TextIO]:
    """A text file whose content reaches ``path`` (None: stdout) only when the block ends without an error:
    :func:`replaced_when_done`, or for stdout an unnamed temporary file (under ``$TMPDIR``, gone when closed)
    copied to stdout once complete, a chunk at a time. A failure or Ctrl-C before that leaves stdout empty, where
    a streamed run wrote to stdout as it went and left a truncated document when its last reading failed (the
    file changed) or it was interrupted; only stdout itself failing during the copy (:class:`StdoutError`, which
    :func:`write_stdout` raises) or Ctrl-C then can cut it, and the command then exits non-zero."""
    if path:
        with replaced_when_done(path) as handle:
            yield handle
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as spool:
        yield spool
        spool.seek(0)
        write_stdout(_decoded(spool.buffer))


def _decoded(data: Any) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    while chunk := data.read(COPY_BYTES):
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)
