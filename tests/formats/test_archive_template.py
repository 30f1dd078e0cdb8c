"""template.yaml: restorable originals live under archives/ of the encrypted transcript bucket, expire by
lifecycle, and the API function may touch archives/ only; ``compactor serve`` keeps them local."""

from __future__ import annotations

from pathlib import Path

from compactor_aws.archive_store import BUCKET_ENV, PREFIX
from compactor_cli import serve
from compactor_cli.sam_template import Template, load_template

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"


def test_archives_expire_and_are_encrypted() -> None:
    bucket = load_template(TEMPLATE_PATH)["Resources"]["TranscriptBucket"]["Properties"]
    rules = {r["Id"]: r for r in bucket["LifecycleConfiguration"]["Rules"]}
    assert rules["ExpireArchives"]["Prefix"] == PREFIX and rules["ExpireArchives"]["Status"] == "Enabled"
    assert rules["ExpireArchives"]["ExpirationInDays"] == {"Ref": "ArchiveRetentionDays"}
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]


def test_the_api_function_reads_and_writes_archives_only() -> None:
    template = Template.load(TEMPLATE_PATH)
    assert template.function_properties("CompactFunction")["Environment"]["Variables"][BUCKET_ENV] == "TranscriptBucket"
    policy = load_template(TEMPLATE_PATH)["Resources"]["CompactFunctionArchiveAccess"]["Properties"]
    statements = policy["PolicyDocument"]["Statement"]
    objects = next(s for s in statements if "s3:GetObject" in s["Action"])
    assert sorted(objects["Action"]) == ["s3:GetObject", "s3:PutObject"]
    assert objects["Resource"]["Fn::Sub"].endswith("/archives/*")
    assert all(set(s["Action"] if isinstance(s["Action"], list) else [s["Action"]]) <=
               {"s3:GetObject", "s3:PutObject", "s3:ListBucket"} for s in statements)


def test_serve_keeps_originals_in_the_local_directory() -> None:
    assert BUCKET_ENV not in serve.template_environment(TEMPLATE_PATH)
