"""Restorable archives through the real handler: expand after compact rebuilds every changed unit
byte-identically, for the caller who compacted only (docs/archives.md)."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

from compactor.archives import Archive, LocalArchiveStore, expand, handle_of, owner_key
from compactor_aws.archive_store import S3ArchiveStore
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event, decision_policy
from .validity import CHAT, CLAUDE_CODE, CODEX, cdump, claude_code_messages, codex_items

CASES = {
    "openai-chat": ("messages", lambda: json.loads(CHAT.read_text(encoding="utf-8"))),
    "anthropic-messages": ("messages", lambda: claude_code_messages(CLAUDE_CODE)),
    "openai-responses": ("input", lambda: codex_items(CODEX)),
}


def _call(module: ModuleType, context: LocalLambdaContext, path: str, body: Any, key_id: str | None = "key-a"
          ) -> tuple[int, Any]:
    response = module.handler(api_event(path, body, key_id), context)
    return response["statusCode"], json.loads(response["body"])


@pytest.mark.parametrize("fmt", list(CASES))
def test_expand_after_compact_rebuilds_every_changed_unit(compact_module: ModuleType,
                                                          lambda_context: LocalLambdaContext, fmt: str) -> None:
    field, load = CASES[fmt]
    items = load()
    status, body = _call(compact_module, lambda_context, "/compact", {
        "format": fmt, field: items, "decision_policy_ir": decision_policy(), "restorable": True})
    assert status == 200, body
    changed = [e for e in body["compaction"]["fragments"] if e["action"] != "keep"]
    assert changed and all(e["handle"].startswith("cmp_") for e in changed)
    assert all("handle" not in e for e in body["compaction"]["fragments"] if e["action"] == "keep")
    text = cdump(body[field])
    assert all(f"restorable: {e['handle']}]" in text for e in changed)

    status, expanded = _call(compact_module, lambda_context, "/expand", {"handles": [e["handle"] for e in changed]})

    assert status == 200, expanded
    for entry in changed:
        assert cdump(expanded["originals"][entry["handle"]]) == cdump(items[entry["start"]:entry["end"]])


def test_handles_are_the_callers_own(compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    items = json.loads(CHAT.read_text(encoding="utf-8"))
    _, body = _call(compact_module, lambda_context, "/compact",
                    {"messages": items, "decision_policy_ir": decision_policy(), "restorable": True})
    handles = [e["handle"] for e in body["compaction"]["fragments"] if "handle" in e]
    unknown = "cmp_" + "0" * 32

    foreign = _call(compact_module, lambda_context, "/expand", {"handles": handles[:1]}, key_id="key-b")
    mixed = _call(compact_module, lambda_context, "/expand", {"handles": [handles[0], unknown]})
    missing = _call(compact_module, lambda_context, "/expand", {"handles": [unknown]})
    malformed = _call(compact_module, lambda_context, "/expand", {"handles": ["../../etc/passwd"]})

    assert foreign == mixed == missing == malformed  # the same 404: nothing says which handles exist
    assert foreign[0] == 404 and "originals" not in foreign[1]
    assert _call(compact_module, lambda_context, "/expand", {"handles": handles[:1]})[0] == 200
    assert _call(compact_module, lambda_context, "/expand", {"handles": []})[0] == 422


def test_without_restorable_nothing_is_stored_and_markers_say_so(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, archive_dir: Any) -> None:
    items = json.loads(CHAT.read_text(encoding="utf-8"))
    _, body = _call(compact_module, lambda_context, "/compact", {"messages": items, "decision_policy_ir": decision_policy()})

    assert all("handle" not in e for e in body["compaction"]["fragments"])
    assert "original retained by caller" in cdump(body["messages"]) and not archive_dir.exists()


def test_seal_mode_is_not_restorable(compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    items = json.loads(CHAT.read_text(encoding="utf-8"))
    status, body = _call(compact_module, lambda_context, "/compact", {"messages": items, "restorable": True})

    assert status == 400 and body["error"]["code"] == "restorable_unavailable"


@pytest.mark.parametrize("fmt", list(CASES))
def test_mask_mode_is_not_restorable(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                     archive_dir: Any, fmt: str) -> None:
    # Mask keeps no original: it used to answer 200 with the outputs masked, no handle and nothing stored,
    # so a caller who asked for restorable originals lost them without a word.
    field, load = CASES[fmt]
    items = load()
    assert _call(compact_module, lambda_context, "/compact", {"format": fmt, field: items, "mode": "mask",
                                                              "keep_recent": 1})[1]["compacted"]

    status, body = _call(compact_module, lambda_context, "/compact", {
        "format": fmt, field: items, "mode": "mask", "keep_recent": 1, "restorable": True})

    assert status == 400 and body["error"] == {"message": "restorable needs decision mode",
                                               "type": "invalid_request_error", "code": "restorable_unavailable"}
    assert not archive_dir.exists()


def test_a_tampered_original_is_not_returned(tmp_path: Any) -> None:
    store = LocalArchiveStore(tmp_path)
    unit = [{"role": "tool", "content": "x"}]
    handle = handle_of(unit)
    store.put(owner_key("me"), handle, b'[{"role":"tool","content":"y"}]')

    assert expand(Archive(store, "me"), [handle])[0] == 404


@mock_aws
def test_s3_store_keeps_originals_per_owner_under_archives() -> None:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="transcripts")
    store = S3ArchiveStore("transcripts", client=client)
    unit = [{"role": "assistant", "content": "é"}]
    handle = handle_of(unit)
    store.put(owner_key("key-a"), handle, cdump(unit).encode())

    assert expand(Archive(store, "key-a"), [handle]) == (200, {"originals": {handle: unit}})
    assert expand(Archive(store, "key-b"), [handle])[0] == 404
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="transcripts")["Contents"]]
    assert keys == [f"archives/{owner_key('key-a')}/{handle}.json"]
