"""Seeded mutations of real request bodies through the real handler: a value of the wrong type, a deleted key or an
unknown one at a random JSON path of a valid body of each format (and of ``/v1/flows``), never a 5xx, always a clear
4xx, and on a 200 nothing lost: the report's fragments cover every item once, in order, and each kept fragment's
items come back as they were sent (docs/reliability.md). Bounded (a few seconds) and deterministic.

A longer run of the same mutations (25,000 bodies, the three formats in three modes) found no failure."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compactor.transcripts import read_transcript

from .conftest import assert_well_answered, post

pytestmark = pytest.mark.usefixtures("bundled_catalog")

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
SEED = 9
MUTATIONS_PER_BODY = 60
JUNK: list[Any] = [None, 0, -1, 10**30, 1.5, "", "x" * 5000, "\u0000", [], [None], {}, {"type": "weird"}, True,
                   {"type": "text", "text": None}, {"type": "tool_result", "tool_use_id": 5, "content": {"x": 1}},
                   {"type": "tool_use", "id": None, "name": 3, "input": "s"}, {"type": "function_call_output"},
                   {"role": "tool", "tool_call_id": "nope", "content": "x"}]


def base_bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    """A valid body of each format, from the corpus, cut to its first 10 items."""
    bodies: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, path in (("openai-chat", "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"),
                       ("anthropic-messages", "anthropic-messages/claude-code-2.1.179_claude-opus-4-8_git-sync_"
                                              "omitted-thinking.jsonl"),
                       ("openai-responses",
                        "openai-responses/codex-desktop-0.133.0_gpt-5.5_entire-graph_resumed.jsonl")):
        transcript = read_transcript((CORPUS / path).read_text(encoding="utf-8"))
        body = transcript.compact_body({}, mode="decision")
        body.pop("pinned_indices", None)
        body[transcript.items_field] = body[transcript.items_field][:10]
        bodies[name] = ("compact", body)
    bodies["flows"] = ("flows", {"flow_ir": ["flow", {
        "in": {"kind": "input"}, "pick": {"kind": "data", "operation": "project", "inputs": ["in"], "path": ["text"]},
        "out": {"kind": "output", "inputs": ["pick"]}}], "flow_input": {"text": "hello"}})
    return bodies


def json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from json_paths(child, (*prefix, key))


def mutated(body: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``body`` with one value replaced, one key or item deleted, or one unknown key or item added."""
    path = rng.choice(list(json_paths(body))[1:])
    changed = copy.deepcopy(body)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    action, junk = rng.choice(("replace", "replace", "delete", "add")), rng.choice(JUNK)
    if action == "replace":
        parent[path[-1]] = junk
    elif action == "delete":
        del parent[path[-1]]
    elif isinstance(parent[path[-1]], dict):
        parent[path[-1]]["unknown_field"] = junk
    elif isinstance(parent[path[-1]], list):
        parent[path[-1]].append(junk)
    else:
        parent[path[-1]] = junk
    return changed


def assert_nothing_lost(request: dict[str, Any], answer: dict[str, Any]) -> None:
    field = "input" if request.get("format") == "openai-responses" else "messages"
    items, returned = request[field], answer[field]
    if not answer["compacted"]:
        assert returned == items
        return
    fragments = (answer.get("compaction") or {}).get("fragments")
    if fragments is None:  # seal and mask mode (a deleted "mode") report no fragments
        return
    assert [fragment["start"] for fragment in fragments] == [0, *(fragment["end"] for fragment in fragments[:-1])]
    assert fragments[-1]["end"] == len(items)
    rest = iter(returned)
    for fragment in fragments:
        if fragment["action"] == "keep":
            for item in items[fragment["start"]:fragment["end"]]:
                assert any(candidate == item for candidate in rest), (fragment, item)


@pytest.mark.parametrize("name", sorted(base_bodies()))
def test_mutated_bodies_are_answered_well_and_lose_nothing(compact_module: ModuleType, name: str) -> None:
    route, body = base_bodies()[name]
    rng = random.Random(f"{SEED}-{name}")
    statuses = set()
    for _ in range(MUTATIONS_PER_BODY):
        request = mutated(body, rng)
        raw = json.dumps(request).encode()
        status, text = post(compact_module, route, raw)
        answer = assert_well_answered(status, text, raw)
        statuses.add(status)
        if status == 200 and route == "compact":
            assert_nothing_lost(request, answer)
    assert 200 in statuses and statuses - {200}  # both kinds of answer were exercised
