"""Running windowed compaction (docs/scale.md): in memory, or streamed between files.

Both run every window inline through :func:`compactor.compaction.windows.compact_window`; the S3
path's Distributed Map runs the very same tasks one worker each (``compactor.large_jobs``).
"""

from __future__ import annotations

import codecs
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import IO, Any

from compactor.budget import Deadline
from compactor.call_record import CallRecord
from compactor.chat import Message
from compactor.cost import RESPONSE_DECIMALS
from compactor.jsonutil import dense_dumps
from compactor.response_blocks import usage_block
from compactor.transcript_stream import ArrayWriter, CheckedOnce, messages_from
from compactor.compaction.windows import (
    DEFAULT_CONCURRENCY,
    RunState,
    Settings,
    admission_probe,
    compact_window,
    compact_windowed,
)

DECISION = "decision"
"""Windowed runs are decision-mode compactions (docs/scale.md)."""
COPY_CHUNK_BYTES = 1 << 20


def inline_runner(router: Any, *, window_budget_ms: int | None = None, deadline: Deadline | None = None,
                  until: Deadline | None = None, flow_runner: Any = None) -> Callable[[dict[str, Any]], Any]:
    """Runs each window here: under one shared ``deadline``, or a fresh ``window_budget_ms`` each (a
    window is one request's worth of work, as one Distributed Map worker gets), none past ``until``."""
    async def run(task: dict[str, Any]) -> dict[str, Any]:
        if deadline is not None:
            window_deadline = deadline
        else:
            budget_ms = window_budget_ms or 0
            window_deadline = Deadline.after_ms(budget_ms if until is None else min(budget_ms, until.remaining_ms()))
        return await compact_window(task, router=router, deadline=window_deadline, flow_runner=flow_runner)
    return run


def run_record(state: RunState, messages: list[Message] | None = None) -> CallRecord:
    """The record of a finished run: its ``/v1/compact`` response body (``compacted``, ``compaction``,
    ``usage`` when models reported tokens) with the final ``messages``, or without them when they are
    streamed out (:func:`write_body`), and the run's totals over every window."""
    report = state.compaction()
    summary: dict[str, Any] = {"compacted": state.first_changed is not None, "compaction": report}
    if state.tokens_in or state.tokens_out:
        summary["usage"] = usage_block(state.tokens_in, state.tokens_out, state.tokens_in + state.tokens_out, None)
    cost = None if state.cost_usd is None else round(state.cost_usd, RESPONSE_DECIMALS)
    # summed from the window flows' nodes, as an inline compaction's flow cost (FlowResult.cost_basis); none when
    # the cost is unknown or no model was called
    basis = "reported" if cost is not None and state.model_calls else None
    return CallRecord(status=200, body=summary if messages is None else {"messages": messages, **summary},
                      mode=DECISION, bytes_in=report["original_bytes"], bytes_out=report["output_bytes"],
                      target_met=report["target_met"], model_calls=state.model_calls,
                      fallbacks=tuple(state.fallbacks), cost_usd=cost, cost_basis=basis,
                      windows_default_cache_prices=tuple(state.default_cache_prices),
                      tokens_in=state.tokens_in or None, tokens_out=state.tokens_out or None, report=report)


def write_body(out: IO[str], messages: Iterable[Message], summary: dict[str, Any], *, messages_only: bool) -> None:
    """Streams the response body (or only its messages array) to ``out``: the same bytes wherever the
    run happened (``compactor compact --json``, the S3 path's ``compacted/`` object)."""
    if not messages_only:
        out.write('{"messages":')
    writer = ArrayWriter(out)
    for message in messages:
        writer.write(message)
    writer.finish()
    _end_body(out, summary, messages_only=messages_only)


def write_body_of_array(out: IO[str], array: IO[bytes], summary: dict[str, Any]) -> None:
    """:func:`write_body`'s bytes for messages an :class:`ArrayWriter` already wrote (a windowed job's pass
    output): the array is copied as it is, never parsed and encoded again, which gave the same bytes at about
    50 MB/s of CPU (docs/performance.md, "Streamed writes")."""
    out.write('{"messages":')
    decoder = codecs.getincrementaldecoder("utf-8")()
    while chunk := array.read(COPY_CHUNK_BYTES):
        out.write(decoder.decode(chunk))
    out.write(decoder.decode(b"", final=True))
    _end_body(out, summary, messages_only=False)


def _end_body(out: IO[str], summary: dict[str, Any], *, messages_only: bool) -> None:
    if not messages_only:
        for key, value in summary.items():
            out.write(f",{dense_dumps(key)}:{dense_dumps(value)}")
        out.write("}")
    out.write("\n")


async def compact_in_memory(request: Any, *, router: Any, run_window: Callable[[dict[str, Any]], Any],
                            concurrency: int = DEFAULT_CONCURRENCY,
                            on_event: Callable[[dict[str, Any]], None] | None = None) -> CallRecord:
    """Windowed compaction of a validated ``CompactRequest``; the call's record. Raises
    ``FlowAdmissionError`` before any window runs when the request's policies are not admissible."""
    settings = Settings.from_request(request)
    admission_probe(settings, router)
    messages = request.messages
    run = await compact_windowed(lambda: messages, settings, run_window=run_window, concurrency=concurrency,
                                 on_event=on_event)
    return run_record(run.state, list(run.source()))


class FileSink:
    """A pass's output as a temporary JSON file under ``directory`` (deleted when the next pass is done
    with it, or by :meth:`cleanup`)."""

    def __init__(self, directory: str, created: list[str], format: str | None = None) -> None:
        self.format = format  # the messages' (None: openai-chat), as the next pass reads them
        handle, self.path = tempfile.mkstemp(prefix="pass-", suffix=".json", dir=directory)
        created.append(self.path)
        self.stream = os.fdopen(handle, "w", encoding="utf-8")
        self.writer = ArrayWriter(self.stream)

    def write(self, message: Message) -> None:
        self.writer.write(message)

    def close(self) -> Callable[[], Iterable[Message]]:
        self.writer.finish()
        self.stream.close()
        path, format = self.path, self.format
        return lambda: _file_messages(path, format)


def _file_messages(path: str, format: str | None = None) -> Iterable[Message]:
    """A pass output's messages: :class:`ArrayWriter` wrote them from dicts, so no key is named twice in them."""
    return messages_from(lambda: open(path, "rb"), format, keys_checked=False)


async def compact_stream(open_source: Callable[[], IO[bytes]], settings: Settings, *, router: Any,
                         run_window: Callable[[dict[str, Any]], Any], out: IO[str], messages_only: bool,
                         workdir: str | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                         on_event: Callable[[dict[str, Any]], None] | None = None) -> CallRecord:
    """Windowed compaction read from ``open_source()`` (opened once per read) and written to ``out``:
    the messages array, or the whole response body. Memory holds a few windows, never the transcript.
    Returns the call's record, its body without the messages. The stream is read in ``settings.format``, its keys
    checked until the first pass's scan has read it whole (:class:`CheckedOnce`: ``open_source`` opens the same bytes
    each time, as :func:`~compactor.transcript_stream.opener` makes sure)."""
    admission_probe(settings, router)
    created: list[str] = []
    source = CheckedOnce(open_source, settings.format)

    try:
        run = await compact_windowed(source, settings, run_window=run_window, concurrency=concurrency,
                                     new_sink=lambda: FileSink(workdir or tempfile.gettempdir(), created,
                                                               settings.format),
                                     on_event=on_event)
        record = run_record(run.state)
        write_body(out, run.source(), record.body, messages_only=messages_only)
        return record
    finally:
        for path in created:
            try:
                os.unlink(path)
            except OSError:
                pass
