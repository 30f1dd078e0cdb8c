"""The S3 path's log lines name the object they are about, and never its content.

One invocation can carry several records (objects); every line written while one object's job runs (its
billing record above all) carries ``bucket``, ``key`` and ``version_id``, so an operator can tie a billing
record or a warning to its object. They used to be on the final ``s3 object ...`` line only: the billing
line of an object had only the invocation's request id, shared by every object of the event.
"""

from __future__ import annotations

import io
import json
import logging
from types import ModuleType
from typing import Any

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext

from ..s3.conftest import BUCKET, aws_env, put_and_event, s3, s3_module, transcript  # noqa: F401 (fixtures)

MARKER = "S3-TRANSCRIPT-MARKER-91c2"


def marked(index: int) -> list[dict[str, Any]]:
    messages = transcript()
    messages[1]["content"] = f"{MARKER} {index} Complete the task."
    return messages


def test_every_line_of_an_objects_job_names_the_object(
        s3: Any, s3_module: ModuleType, caplog: pytest.LogCaptureFixture,  # noqa: F811 (fixtures)
        capsys: pytest.CaptureFixture[str]) -> None:
    first = put_and_event(s3, "incoming/a/one.json", json.dumps(marked(1)))
    second = put_and_event(s3, "incoming/b/two.json", json.dumps(marked(2)), sequencer="0065A1B2C3D4E5F602")
    event = {"Records": first["Records"] + second["Records"]}
    written = io.StringIO()  # what the function writes, formatted when written (the appended keys then)
    handler = s3_module.logger.registered_handler
    stream = handler.setStream(written)
    try:
        with caplog.at_level(logging.INFO):
            results = s3_module.handler(event, LocalLambdaContext("S3CompactFunction", 300))["results"]
            s3_module.handler({"Event": "s3:TestEvent"}, LocalLambdaContext("S3CompactFunction", 300))
    finally:
        handler.setStream(stream)
    lines = [json.loads(line) for line in written.getvalue().splitlines()]

    assert [result["result"] for result in results] == ["compacted", "compacted"]
    billing = [line for line in lines if line.get("record_type") == "billing"]
    assert [(line["bucket"], line["key"]) for line in billing] == [
        (BUCKET, "incoming/a/one.json"), (BUCKET, "incoming/b/two.json")]
    versions = [record["s3"]["object"]["versionId"] for record in event["Records"]]
    assert [line["version_id"] for line in billing] == versions
    done = [line for line in lines if line["message"].startswith("s3 object")]
    assert [line["key"] for line in done] == ["incoming/a/one.json", "incoming/b/two.json"]
    # the next invocation's lines name no object of this one
    (test_event,) = [line for line in lines if line["message"] == "s3 event without records"]
    assert "key" not in test_event and "bucket" not in test_event
    assert MARKER not in written.getvalue() + capsys.readouterr().out
