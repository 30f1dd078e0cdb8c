"""``compactor compact FILE``: compact a transcript file, report on stderr, result to --output/stdout."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from compactor.compaction.modes import names as mode_names
from compactor.errors import describe_validation
from compactor.formats import FORMAT_NAMES, WINDOWED_FORMATS
from compactor.transcripts import CLAUDE_CODE, CODEX, TRANSCRIPT_MODE, Transcript, TranscriptError, read_transcript
from compactor_cli.files import (BROKEN_PIPE_EXIT, InputError, StdoutClosed, StdoutError, display_name, os_cause,
                                 read_text, replaced_when_done, unwritable, write_stdout, written_when_done)
from compactor_cli.main import each_warning_once, whole_number

if TYPE_CHECKING:
    from compactor.call_record import CallRecord


def _json_arg(value: str) -> Any:
    """A JSON value given inline or as ``@path`` (an unreadable file is a usage error, exit 2), read as the API
    reads a body (``bounded_loads``): a key twice in one object, ``NaN`` or nesting past 128 levels is refused,
    where ``json.loads`` kept the last of the key's values, took ``NaN`` and raised ``RecursionError``."""
    from compactor.jsonutil import JSONLimitError, bounded_loads

    try:
        text = read_text(value[1:]) if value.startswith("@") else value
    except InputError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {exc}") from None
    try:
        return bounded_loads(text)
    except JSONLimitError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg}" if exc.syntax else exc.msg) from None


STRICT_EXIT = 3  # --strict and a model call fell back


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="transcript: JSON array, object with 'messages' (or 'input'), JSONL of "
                        "messages, a Claude Code session or a Codex rollout ('-' = stdin)")
    parser.add_argument("--format", choices=FORMAT_NAMES,
                        help="the transcript's format (default: detected; the output keeps it)")
    parser.add_argument("--restorable", action="store_true",
                        help="keep the originals of changed units (decision mode) under $COMPACTOR_ARCHIVE_DIR "
                             "or ~/.compactor/archives; the manifest names their handles")
    parser.add_argument("--mode", choices=mode_names(),
                        help=f"compaction mode (default: a request body's own, inferred as the API does; "
                             f"{TRANSCRIPT_MODE} for a bare transcript)")
    parser.add_argument("--target-ratio", type=float, help="decision mode target, 0 < r <= 1 (default 0.1)")
    parser.add_argument("--keep-recent", type=int,
                        help="messages of the recent tail always kept (default 6; decision mode without it: the "
                             "last 6 as far as they fit in 30%% of the target, always the last one)")
    parser.add_argument("--pin", type=int, action="append", dest="pins", metavar="INDEX",
                        help="protect this message index (repeatable; default: every user message but a text "
                             "agent's tool observations)")
    parser.add_argument("--pin-task", action="store_true",
                        help="pin only the first user message (for agents whose observations are user messages)")
    parser.add_argument("--decision-policy", type=_json_arg, help="Σ_pol policy for decisions (JSON or @file)")
    parser.add_argument("--policy", type=_json_arg, help="Σ_pol policy for summaries (JSON or @file)")
    parser.add_argument("--max-tokens", type=int, help="summary max_tokens (default 512; decision mode without it:"
                        " room for each batch's summaries, 512-4096)")
    parser.add_argument("--catalog", help="catalog JSON replacing the bundled offline offers")
    parser.add_argument("--output", "-o", help="write the compacted body here instead of stdout ('-' = stdout)")
    parser.add_argument("--html", metavar="FILE", help="also write the visual report (one self-contained HTML page)")
    parser.add_argument("--show-summaries", type=lambda text: whole_number(text, 0), default=0, metavar="N",
                        help="print the N summaries that saved the most, each beside its original")
    parser.add_argument("--force", action="store_true", help="allow --output to overwrite the input file")
    parser.add_argument("--json", action="store_true", help="write the raw /v1/compact response, not just messages")
    parser.add_argument("--quiet", "-q", action="store_true", help="no report on stderr")
    parser.add_argument("--strict", action="store_true",
                        help="exit 3 when any model call fell back (the output is still written)")


def build_request_body(args: argparse.Namespace, transcript: Transcript) -> dict[str, Any]:
    """The ``/v1/compact`` body for ``transcript`` with the command line's settings over its own fields."""
    body = transcript.compact_body(mode=args.mode)
    messages = body[transcript.items_field]  # a session's: from where its harness resumes (docs/formats.md)
    if getattr(args, "restorable", False):
        body["restorable"] = True
    if args.pin_task:
        first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        task = [] if first_user is None else [first_user]
        body["pinned_indices"] = sorted(set(task) | set(args.pins or []))
    for key, value in (("target_ratio", args.target_ratio), ("keep_recent", args.keep_recent),
                       ("pinned_indices", None if args.pin_task else args.pins), ("policy_ir", args.policy), ("max_tokens", args.max_tokens)):
        if value is not None:
            body[key] = value
    if args.decision_policy is not None:
        body["decision_policy_ir"] = args.decision_policy
    return transcript.pinning_starts(body)


STREAM_BYTES = 32 * 1024 * 1024
"""Files larger than this are compacted as streams, in windows (docs/scale.md)."""


def run(args: argparse.Namespace) -> int:
    with _terminate_as_interrupt(), each_warning_once():
        return _run(args)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``timeout``, ``kill``, a job cancelled) stops the run as Ctrl-C does: ``--output``'s hidden file and
    the pass outputs beside it (or under ``$TMPDIR``) are removed and it exits 130 (README). It killed the process at
    once, leaving them there (``.out.json.<pid>.partial`` and a ``pass-*.json`` the size of a pass). Only from the
    main thread, where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the run is cleaning up
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    if args.catalog:
        os.environ["COMPACTOR_CATALOG"] = args.catalog
    if args.output == "-":  # as FILE '-' is stdin (it wrote a file named '-')
        args.output = None
    problem = _output_problem(args)
    if problem:
        print(f"compactor compact: {problem}", file=sys.stderr)
        return 2
    if (args.mode in (None, "decision") and args.file != "-" and _size(args.file) > STREAM_BYTES
            and not args.restorable and args.format in (None, *WINDOWED_FORMATS)):  # what windows read (docs/scale.md)
        streamed = _run_streamed(args)
        if streamed is not None:
            return streamed
    try:
        transcript = read_transcript(read_text(args.file), args.format)
    except InputError as exc:
        print(f"compactor compact: {exc}", file=sys.stderr)
        return 2
    except TranscriptError as exc:
        print(f"compactor compact: {display_name(args.file)}: {exc}", file=sys.stderr)
        return 2
    from compactor.models import CompactRequest

    try:
        request = CompactRequest.model_validate(build_request_body(args, transcript))
    except ValidationError as exc:
        print(f"compactor compact: invalid request: {describe_validation(exc)}", file=sys.stderr)
        return 2
    from compactor.catalog import CatalogError
    from compactor_cli.report import Progress, render_examples, render_report

    progress = None if args.quiet else Progress(sys.stderr)
    started = time.monotonic()
    try:
        record, units = compact_locally(request, progress, _archive() if request.restorable else None,
                                        windows=transcript.session is None)
    except CatalogError as exc:
        print(f"compactor compact: {exc}", file=sys.stderr)
        return 2
    if progress:
        progress.finish()
    body = record.body
    if not record.ok:
        return _answered_with(record)
    seconds = time.monotonic() - started
    if not args.quiet:
        sys.stderr.write(render_report(request, record, seconds, units))
        if transcript.already_compacted:
            print(already_compacted_line(transcript), file=sys.stderr)
    if args.show_summaries and record.report is not None and not args.quiet:
        sys.stderr.write(render_examples(request.messages, body, units, args.show_summaries))
    html_written = not args.html or _write_html(args, request.messages, record, units, request.keep_recent,
                                                seconds, request.format)
    items_field = "input" if request.format == "openai-responses" else "messages"
    session = None if args.json else transcript.write_back(record)
    if args.json and transcript.already_compacted is not None:  # the items the response leaves out, counted
        body = {**body, "already_compacted": transcript.already_compacted}
    text = session if session is not None else json.dumps(body if args.json else body[items_field],
                                                           ensure_ascii=False, indent=2) + "\n"
    if args.output:
        try:
            with replaced_when_done(args.output) as handle:
                handle.write(text)
        except OSError as exc:
            print(f"compactor compact: cannot write {args.output}: {os_cause(exc)}", file=sys.stderr)
            return 2
        if not args.quiet:
            _report_written(args.output, len(text.encode("utf-8")), written_as(
                session=transcript.session if session is not None else None, whole_body=args.json,
                items_field=items_field, streamed=False))
    else:
        try:
            write_stdout([text])
        except StdoutError as exc:
            return _stdout_failed(exc)
    if not html_written:
        return 2
    return _strict_exit(args, record)


def _stdout_failed(exc: StdoutError) -> int:
    """A stdout that could not take the whole result: quiet and :data:`BROKEN_PIPE_EXIT` when its reader has gone (``|
    head``), as ``cat`` and ``yes`` end there; else one line and exit 2 (README, "Command line")."""
    if isinstance(exc, StdoutClosed):
        return BROKEN_PIPE_EXIT
    print(f"compactor compact: cannot write stdout: {exc}", file=sys.stderr)
    return 2


def _strict_exit(args: argparse.Namespace, record: CallRecord) -> int:
    """0, or with ``--strict`` 3 when any model call fell back, in one request or in windows (README)."""
    from compactor.provider_failures import calls_fell_back

    fell_back = calls_fell_back(record)
    if args.strict and fell_back:
        print(f"compactor compact: --strict: {fell_back} model call(s) fell back", file=sys.stderr)
        return STRICT_EXIT
    return 0


SESSION_FILES = {CLAUDE_CODE: "a Claude Code session", CODEX: "a Codex rollout"}


def already_compacted_line(transcript: Transcript) -> str:
    """The report's line on a session file's items before its harness's own last compaction: left out of the
    request, written back as they are (docs/formats.md, "Session files")."""
    where = "compact_boundary" if transcript.session == CLAUDE_CODE else "compacted line"
    return (f"already compacted: {transcript.already_compacted} items before the last {where} of"
            f" {SESSION_FILES[transcript.session or '']} were left out, not sent, and written back as they are")


def written_as(*, session: str | None, whole_body: bool, items_field: str, streamed: bool) -> str:
    """What ``--output`` holds, in the words of the line that names it: a session file goes back as
    JSONL in its own kind; otherwise the response body (``--json``) or the items array, as JSON
    pretty-printed (in memory) or one dense message per line (streamed, docs/scale.md). Neither is the
    dense size the report measures."""
    if session is not None:
        return f"{SESSION_FILES[session]} as JSONL, its other records kept, so not the dense size above"
    what = "the /v1/compact response body" if whole_body else f"the {items_field} array"
    if streamed:
        return f"{what} as JSON, one dense message per line"
    return f"{what} as pretty-printed JSON, so larger than the dense size above"


def _report_written(path: str, size: int, what: str) -> None:
    print(f"wrote {path} ({size} bytes on disk: {what})", file=sys.stderr)


def _write_html(args: argparse.Namespace, messages: list[dict[str, Any]], record: CallRecord,
                units: list[dict[str, Any]], keep_recent: int, seconds: float, items_format: str) -> bool:
    """Write the HTML report to ``--html``; False (said on stderr) when it cannot be written."""
    from compactor_cli.html_report import render_html

    # a name's bytes that are not UTF-8 as \xNN, as compactor eval names them (docs/report.md)
    title = os.fsencode(display_name(os.path.basename(args.file))).decode("utf-8", "backslashreplace")
    page = render_html(messages, record, units, title=title, keep_recent=keep_recent, seconds=seconds,
                       items_format=items_format)
    try:
        with open(args.html, "w", encoding="utf-8") as handle:
            handle.write(page)
    except OSError as exc:  # checked before the compaction, so only a change since (a full disk …)
        print(f"compactor compact: cannot write {args.html}: {os_cause(exc)}", file=sys.stderr)
        return False
    if not args.quiet:
        print(f"wrote the HTML report {args.html}", file=sys.stderr)
    return True


def _output_problem(args: argparse.Namespace) -> str | None:
    """Why ``--output`` or ``--html`` cannot be used (checked before any model call), or None."""
    if args.html:
        problem = unwritable(args.html, "--html")
        if problem:
            return problem
        if args.file != "-" and os.path.exists(args.html) and os.path.exists(args.file) \
                and os.path.samefile(args.html, args.file):
            return f"--html {args.html} is the input file"
    if not args.output:
        return None
    problem = unwritable(args.output, "--output")
    if problem:
        return problem
    if args.file != "-" and not args.force and os.path.exists(args.output) and os.path.exists(args.file) \
            and os.path.samefile(args.output, args.file):
        return f"--output {args.output} is the input file; pass --force to overwrite it"
    return None


def compact_locally(request: Any, progress: Any = None, archive: Any = None, *, windows: bool = True
                    ) -> tuple[CallRecord, list[dict[str, Any]]]:
    """Compact in-process: the call's record and the whole manifest, each unit with its reason
    (docs/report.md). ``windows`` False: one request whatever its limits (a session file is written back from
    its manifest, which windows do not give)."""
    from compactor.container import run_sync
    from compactor.service import compact_call, compact_large, request_deadline

    units: list[dict[str, Any]] = []

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "units":
            units[:] = event["units"]
        elif progress is not None:
            progress.on_event(event)

    if request.mode_name == "decision" and windows:
        from compactor.compaction.decision import exceeds_one_request

        if exceeds_one_request(request):
            return run_sync(compact_large(request, on_event=on_event)), units
    return run_sync(compact_call(request, deadline=request_deadline(), on_event=on_event, archive=archive)), units


def _archive() -> Any:
    """The local caller's originals: the caller of ``compactor serve`` without an API key (docs/archives.md)."""
    from compactor.archives import Archive, default_local_store
    from compactor_aws.caller import ANONYMOUS

    return Archive(default_local_store(), ANONYMOUS)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _run_streamed(args: argparse.Namespace) -> int | None:
    """A large file: read twice per pass as a stream (three times for ``anthropic-messages``), windows compacted
    inline, output streamed; None when the file is to be read whole instead: a format windows do not read (an
    ``openai-responses`` transcript, a session file), or a restorable request (docs/scale.md). A file naming no
    format is read as chat until an Anthropic message shows it is ``anthropic-messages``: it is then read as that
    (the first pass's scan reads the whole file before any window runs or any output is written)."""
    from compactor.transcripts import NotChat

    try:
        return _run_streamed_as(args, args.format)
    except NotChat as exc:
        if args.format is not None or exc.format is None:
            return None
        return _run_streamed_as(args, exc.format)


def _run_streamed_as(args: argparse.Namespace, format: str | None) -> int | None:
    """:func:`_run_streamed` reading the file in ``format`` (None: the one it names, else ``openai-chat``); a
    :class:`NotChat` naming the format the file is in when it names none and holds another."""
    from pydantic import ValidationError

    from compactor.catalog import CatalogError
    from compactor.container import get_router, run_sync
    from compactor.errors import InvalidFlow, InvalidRequest
    from compactor.flow import FlowAdmissionError
    from compactor.models import CompactRequest
    from compactor.budget import flow_budget_ms
    from compactor.compaction.windowed import compact_stream, inline_runner
    from compactor.compaction.windows import Settings
    from compactor.transcript_stream import fields_from, messages_from, opener, whole_read_mode
    from compactor.transcripts import NotChat
    from compactor_cli.report import WindowProgress, render_windowed_report

    source = opener(args.file)
    named = None

    def shows_another_format(exc: NotChat) -> bool:
        """Whether a file read as chat only because it names no format showed another that windows read:
        :func:`_run_streamed` reads it again in that format."""
        return exc.format is not None and format == "openai-chat" and args.format is None and named is None

    try:
        fields = fields_from(source)
        policy = {} if args.decision_policy is None else {"decision_policy_ir": args.decision_policy}
        if fields.get("restorable") is True or (args.mode is None and whole_read_mode(source, {**fields, **policy})
                                                != "decision"):
            return None  # read whole: the mode a request body naming none runs in is inferred (docs/scale.md)
        named = fields.pop("format", None)  # --format over it, as for a file read whole
        format = format or named or "openai-chat"
        # Its first message read (the --pin-task reading reads it too): a file in another format is read whole.
        first_user = _until_first_user(messages_from(source, format)) if args.pin_task else []
        if not args.pin_task:
            next(iter(messages_from(source, format)), None)
        request = CompactRequest.model_validate(build_request_body(args, Transcript(format, first_user, fields, request_body=bool(fields))) | {"messages": []})
    except NotChat as exc:
        if shows_another_format(exc):
            raise
        return None
    except OSError as exc:  # gone, or unreadable, since its size was read
        print(f"compactor compact: {display_name(args.file)}: {os_cause(exc)}", file=sys.stderr)
        return 2
    except TranscriptError as exc:
        print(f"compactor compact: {display_name(args.file)}: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"compactor compact: invalid request: {describe_validation(exc)}", file=sys.stderr)
        return 2
    progress = None if args.quiet else WindowProgress(sys.stderr)
    started = time.monotonic()
    try:
        with written_when_done(args.output) as out:  # stdout too: nothing of a run that fails (docs/scale.md)
            router = get_router()
            record = run_sync(compact_stream(
                source, Settings.from_request(request), router=router,
                run_window=inline_runner(router, window_budget_ms=flow_budget_ms()), out=out,
                messages_only=not args.json,
                workdir=os.path.dirname(os.path.abspath(args.output)) if args.output else None,
                on_event=progress.on_event if progress else None))
    except FlowAdmissionError as exc:  # the policies, refused before any window ran: the API's 400 invalid_flow
        return _answered_with(InvalidFlow.rejected(exc))
    except InvalidRequest as exc:  # a --pin past the transcript, known once the stream is counted; a negative max_tokens
        return _answered_with(exc)
    except NotChat as exc:  # a later message in another format (Anthropic blocks after a first plain user message),
        # met by the first pass's scan, which reads the whole file before any window runs or any output is written
        if shows_another_format(exc):
            raise  # read again in that format (_run_streamed)
        return None
    except CatalogError as exc:
        print(f"compactor compact: {exc}", file=sys.stderr)
        return 2
    except TranscriptError as exc:  # met by a reading after the first message: named as a file read whole names it
        print(f"compactor compact: {display_name(args.file)}: {exc}", file=sys.stderr)
        return 2
    except StdoutError as exc:
        return _stdout_failed(exc)
    except OSError as exc:  # opening the file (named), or writing the output or a pass's (a full disk …)
        where = exc.filename or f"cannot write {args.output or f'a temporary file in {tempfile.gettempdir()}'}"
        print(f"compactor compact: {where}: {os_cause(exc)}", file=sys.stderr)
        return 2
    seconds = time.monotonic() - started
    html_written = not args.html or _write_html(args, [], record, [], request.keep_recent, seconds, request.format)
    if not args.quiet:
        sys.stderr.write(render_windowed_report(record, seconds))
        if args.output:
            _report_written(args.output, _size(args.output), written_as(
                session=None, whole_body=args.json, items_field="messages", streamed=True))
    return _strict_exit(args, record) if html_written else 2


def _answered_with(answer: Any) -> int:
    """A run the core refused, its status and body on stderr and exit 1 (README, "Command line"): ``answer`` is the
    ``CallRecord`` of a file read whole, or the ``compactor.errors.CompactorError`` a streamed run raised; each gives
    the API's status and body (``answer()``, as ``call_record.refused`` makes a record of an error)."""
    status, body = answer.answer()
    print(f"compactor compact: HTTP {status}: {json.dumps(body)}", file=sys.stderr)
    return 1


def _until_first_user(messages: Any) -> list[dict[str, Any]]:
    """The messages up to and including the first user message (what --pin-task needs to see)."""
    seen: list[dict[str, Any]] = []
    for message in messages:
        seen.append(message)
        if message.get("role") == "user":
            break
    return seen
