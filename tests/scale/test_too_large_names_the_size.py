"""A windowed job's refusal for what objects its size cannot be (413, docs/scale.md) names that size: the S3 function's
inline size (``S3InlineMaxBytes``), over which it started the job, and says how a smaller one is compacted."""

from __future__ import annotations

import json
from typing import Any

from compactor import large_jobs
from compactor.object_jobs import Defaults, Source
from compactor_aws import windowed_jobs
from compactor_aws.s3_store import S3Store

from s3.conftest import BUCKET, aws_env, s3  # noqa: F401  (fixtures)

SESSION = "\n".join(json.dumps(record) for record in [
    {"type": "queue-operation", "operation": "enqueue"},
    {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "fix the build"}},
    {"type": "assistant", "uuid": "u2", "parentUuid": "u1",
     "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]}}]) + "\n"


class Starts:
    """A Step Functions client that keeps the executions started."""

    class exceptions:  # noqa: N801 - boto3's shape
        class ExecutionAlreadyExists(Exception):
            pass

    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []

    def start_execution(self, **kwargs: Any) -> None:
        self.inputs.append(json.loads(kwargs["input"]))


def failure_of(s3: Any, key: str, job: dict[str, Any]) -> dict[str, Any]:
    outcome = large_jobs.plan(S3Store(), job, Defaults())
    assert outcome["result"] == "failed", outcome
    return json.loads(s3.get_object(Bucket=BUCKET, Key="failed/" + key[len("incoming/"):])["Body"].read())


def test_the_job_is_started_with_the_size_it_is_over_and_its_refusal_names_it(s3):
    # The record read "transcripts this large are compacted in windows, which read openai-chat and anthropic-messages
    # only: line 2 is a Claude Code session's user record (anthropic-messages)": how large, and how else to send it,
    # the caller could not know.
    put = s3.put_object(Bucket=BUCKET, Key="incoming/session.jsonl", Body=SESSION.encode())
    source = Source(BUCKET, "incoming/session.jsonl", put.get("VersionId"), put["ETag"].strip('"'))
    client = Starts()
    launch = windowed_jobs.launcher({windowed_jobs.STATE_MACHINE_ENV: "arn:aws:states:us-east-1:1:stateMachine:w",
                                     windowed_jobs.INLINE_MAX_ENV: "100"}, client=client)
    assert launch is not None and launch(source).result == "started"
    (started,) = client.inputs
    assert started["job"]["inline_max_bytes"] == 100
    failure = failure_of(s3, "incoming/session.jsonl", started["job"])
    assert failure["status"] == 413 and failure["error"]["code"] == "request_too_large"
    message = failure["error"]["message"]
    assert message.startswith("transcripts over 100 bytes are compacted in windows, which read openai-chat and "
                              "anthropic-messages only: line 2 is a Claude Code session's user record"), message
    assert message.endswith("(up to 100 bytes is compacted as one request, in its own format)"), message


def test_each_refusal_for_the_size_names_it_and_a_job_started_before_reads_as_it_did(s3):
    cases = {"incoming/restorable.json": ({"restorable": True, "messages": [{"role": "user", "content": "x"}]},
                                          "transcripts over 100 bytes are compacted in windows, which keep no "
                                          "restorable archives"),
             "incoming/sealed.json": ({"mode": "seal", "messages": [{"role": "user", "content": "x"}]},
                                      "transcripts over 100 bytes are compacted in decision mode only")}
    for key, (body, message) in cases.items():
        put = s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(body).encode())
        source = Source(BUCKET, key, put.get("VersionId"), put["ETag"].strip('"'))
        assert failure_of(s3, key, large_jobs.job_input(source, max_concurrency=1, inline_max_bytes=100)["job"])[
            "error"]["message"] == message
    # an execution started without the size (before the S3 function gave it)
    put = s3.put_object(Bucket=BUCKET, Key="incoming/old.json", Body=json.dumps(cases["incoming/sealed.json"][0]).encode())
    job = large_jobs.job_input(Source(BUCKET, "incoming/old.json", put.get("VersionId"), put["ETag"].strip('"')),
                               max_concurrency=1)["job"]
    assert "inline_max_bytes" not in job
    assert failure_of(s3, "incoming/old.json", job)["error"]["message"] == \
        "transcripts this large are compacted in decision mode only"
