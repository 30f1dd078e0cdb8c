"""Inline images, files and audio (base64) reach no model: the models' view shows each by its kind and size, so a
unit holding a screenshot is compacted like any other (docs/formats.md "Images and files")."""

from __future__ import annotations

import base64
import copy
import json
from types import ModuleType
from typing import Any

import pytest

from compactor.formats import get_dialect
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event
from .validity import PROBLEMS

DATA = base64.b64encode(bytes(range(256)) * 600).decode()  # 153,600 bytes, 204,800 characters of base64
SHOWN = "[image/png, 153600 bytes]"
URL = "data:image/png;base64," + DATA

ITEMS: dict[str, list[dict[str, Any]]] = {
    "anthropic-messages": [
        {"role": "user", "content": [{"type": "text", "text": "this page"},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": DATA}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "screenshot"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}}]}]}],
    "openai-chat": [
        {"role": "user", "content": [{"type": "text", "text": "this page"},
                                     {"type": "image_url", "image_url": {"url": URL, "detail": "low"}}]}],
    "openai-responses": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "this page"},
                                                        {"type": "input_image", "image_url": URL}]},
        {"type": "computer_call_output", "call_id": "c", "output": {"type": "computer_screenshot", "image_url": URL}},
        {"type": "function_call_output", "call_id": "f", "output": [{"type": "input_image", "image_url": URL}]}],
}


@pytest.mark.parametrize("fmt", list(ITEMS))
def test_the_models_view_shows_an_inline_image_by_its_size_and_leaves_the_item_alone(fmt: str) -> None:
    items = ITEMS[fmt]
    before = copy.deepcopy(items)

    view = json.dumps(get_dialect(fmt).model_view(items))

    assert DATA not in view and view.count(SHOWN) == len(items)  # one image an item
    assert items == before


def _screenshots(fmt: str, count: int) -> list[dict[str, Any]]:
    """An agent taking a screenshot after each step: each result holds one (about 200 KB of base64)."""
    items: list[dict[str, Any]] = []
    for n in range(count):
        if fmt == "anthropic-messages":
            items += [{"role": "user", "content": f"Step {n}: open the settings page and check the toggle."},
                      {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{n}", "name": "screenshot",
                                                         "input": {}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": [
                          {"type": "text", "text": f"page {n}"},
                          {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}}]}]}]
        else:
            items += [{"role": "user", "content": f"Step {n}: open the settings page and check the toggle."},
                      {"type": "computer_call", "call_id": f"c{n}", "action": {"type": "screenshot"},
                       "pending_safety_checks": [], "status": "completed"},
                      {"type": "computer_call_output", "call_id": f"c{n}",
                       "output": {"type": "computer_screenshot", "image_url": URL}}]
    return items


@pytest.mark.parametrize("fmt", ["anthropic-messages", "openai-responses"])
def test_decision_mode_compacts_the_units_holding_screenshots(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str) -> None:
    """Batches were cut on each unit's whole JSON, base64 included, and a unit over the summary record's 50,000
    bytes fitted no batch: every screenshot was kept (``not_sent``, ``fragment_or_decision_context_limit``), and a
    smaller image was pasted into the model prompts as base64."""
    items = _screenshots(fmt, 4)
    field = "input" if fmt == "openai-responses" else "messages"
    response = compact_module.handler(api_event("/compact", {
        "format": fmt, field: items, "mode": "decision", "keep_recent": 1}), lambda_context)
    body = json.loads(response["body"])

    assert response["statusCode"] == 200, body
    report = body["compaction"]
    assert report["reasons"] == [] and not [f for f in report["fragments"] if f["reason"] == "not_sent"]
    changed = [f for f in report["fragments"] if f["action"] != "keep"]
    assert len(changed) == 3  # every screenshot but the last, in the tail
    assert report["output_bytes"] < report["original_bytes"] / 3
    assert PROBLEMS[fmt](body[field]) == []
