"""The same bytes judged the same way on every path that reads a transcript request: the API (its handler, with
the event ``compactor serve`` builds), the S3 path (an object read whole), ``compactor compact`` (a file read
whole) and the streamed reading of large files and objects (docs/behaviour.md#requests-and-responses,
docs/scale.md "Streaming")."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compactor.object_jobs import Defaults, Failure, build_request
from compactor.transcript_stream import fields_from, messages_from, opener
from compactor.transcripts import TranscriptError, read_transcript
from compactor_cli.files import read_text

from .conftest import post

pytestmark = pytest.mark.usefixtures("bundled_catalog")

MESSAGES = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."}]
BODY = json.dumps({"messages": MESSAGES}).encode("utf-8")


def api(module: ModuleType, raw: bytes) -> tuple[int, Any]:
    status, text = post(module, "compact", raw)
    return status, json.loads(text)


def s3(raw: bytes) -> Any:
    return build_request(raw, Defaults())


def cli(raw: bytes, tmp_path: Path) -> Any:
    path = tmp_path / "transcript.json"
    path.write_bytes(raw)
    return read_transcript(read_text(str(path)))


def streamed(raw: bytes, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = tmp_path / "streamed.json"
    path.write_bytes(raw)
    source = opener(str(path))
    return fields_from(source), list(messages_from(source))


def test_a_leading_byte_order_mark_is_skipped_on_every_path(compact_module: ModuleType, tmp_path: Path) -> None:
    # The API answered 422 "Unexpected UTF-8 BOM" where the S3 path and the CLI read the JSON after it.
    raw = b"\xef\xbb\xbf" + BODY

    status, body = api(compact_module, raw)
    assert status == 200, body
    assert body["messages"] == MESSAGES
    assert s3(raw).messages == MESSAGES
    assert cli(raw, tmp_path).items == MESSAGES
    assert streamed(raw, tmp_path) == ({}, MESSAGES)


def test_a_byte_order_mark_inside_a_base64_body_is_skipped_too(compact_module: ModuleType) -> None:
    from compactor_cli.lambda_runtime import LocalLambdaContext

    from ..unit.api.helpers import load_event

    event = load_event("compact-legacy", base64_body=b"\xef\xbb\xbf" + BODY)
    response = compact_module.handler(event, LocalLambdaContext("CompactFunction", timeout_s=60))

    assert response["statusCode"] == 200, response["body"]
    assert json.loads(response["body"])["messages"] == MESSAGES
