"""What a streamed reading leaves in memory once it is done: nothing of its caller's frames. A Lambda container runs
job after job; what one job's reading keeps stays for the container's life (docs/scale.md, "Streaming")."""

from __future__ import annotations

import gc
import io
import json
import weakref
from typing import Any

import pytest

from compactor.transcript_stream import messages_from
from compactor.transcripts import TranscriptError

MESSAGE = {"role": "user", "content": "fix it"}


class Held:
    """An object only the reading's caller holds (a windowed plan's facts of the whole transcript, say)."""


def read_in_a_frame(data: bytes) -> tuple[weakref.ref[Held], Any]:
    """Read ``data`` in a frame holding a :class:`Held`: a reference to the object, and what the reading gave (its
    messages, or the refusal's message)."""
    held = Held()
    try:
        return weakref.ref(held), list(messages_from(lambda: io.BytesIO(data)))
    except TranscriptError as exc:
        return weakref.ref(held), str(exc)


@pytest.mark.parametrize("data, expected", [
    # brackets enough in a string to send the stream to the path-free reading (PathsTooLong), read again from its start
    (json.dumps([MESSAGE, {"role": "assistant", "content": "[" * 4000 + "x" * 20_000}]).encode(), 2),
    # a raw form feed: the reader stops the stream and the reading refuses it
    (json.dumps([MESSAGE, MESSAGE]).encode().replace(b'"content"', b'\x0c"content"'), "not JSON: a raw form feed"),
])
def test_a_reading_the_reader_stopped_leaves_nothing_of_its_caller_behind(data, expected):
    # The reason the reader stopped the stream, held by the reader and raised, held the reading's frames by its
    # traceback (the caller's with them), and ijson's C parser held the reader's read without telling the collector:
    # a cycle never freed. A windowed plan of a 100 MB anthropic-messages transcript (read again path-free) kept
    # 19 MB of its scan in the container for good, one more each job.
    ref, read = read_in_a_frame(data)
    gc.collect()
    assert ref() is None
    assert (len(read) if isinstance(read, list) else read).__str__().startswith(str(expected))
