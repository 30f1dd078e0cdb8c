"""The README's worked examples answer what it shows: each request is sent to ``compactor serve`` as the
README's curl sends it, the answer is projected as its jq filter projects it, and compared with the
commented answer printed under it (``"…"`` stands for any text, a text ending in ``…`` for its start)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.local_serve import api_server

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TRANSCRIPT = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
CHEAPEST_FOUR = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
                 ["top_k", 4, ["argmax"]], ["id"], ["always", {"action": "next_candidate"}]]

pytestmark = pytest.mark.usefixtures("bundled_catalog")  # the README's examples run on the offline offers


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with api_server() as base:
        yield base


def shown_answer(heading: str) -> Any:
    """The JSON commented under the first code block after the README line starting with ``heading``."""
    text = README.read_text(encoding="utf-8")
    after = text[text.index(heading):]
    block = after[after.index("```sh\n"):]
    block = block[:block.index("\n```", 5)]
    comment = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    return json.loads("\n".join(comment))


def matches(shown: Any, actual: Any, where: str = "$") -> list[str]:
    """Where ``actual`` differs from ``shown``."""
    if isinstance(shown, str) and shown.endswith("…"):
        return [] if isinstance(actual, str) and actual.startswith(shown[:-1]) else [f"{where}: {actual!r}"]
    if isinstance(shown, dict) and isinstance(actual, dict):
        if shown.keys() != actual.keys():
            return [f"{where}: keys {sorted(actual)} (README: {sorted(shown)})"]
        return [problem for key in shown for problem in matches(shown[key], actual[key], f"{where}.{key}")]
    if isinstance(shown, list) and isinstance(actual, list) and len(shown) == len(actual):
        return [problem for i, (s, a) in enumerate(zip(shown, actual)) for problem in matches(s, a, f"{where}[{i}]")]
    return [] if shown == actual and type(shown) is not bool or shown is actual else [f"{where}: {actual!r}"]


def _decision(answer: dict[str, Any]) -> dict[str, Any]:
    compaction = answer["compaction"]
    return {"compacted": answer["compacted"],
            "compaction": {k: v for k, v in compaction.items() if k != "fragments"},
            "first_units": compaction["fragments"][:3], "cost": answer["x_router"]["cost_usd"]}


def _seal(answer: dict[str, Any]) -> dict[str, Any]:
    return {"compacted": answer["compacted"], "messages": len(answer["messages"]),
            "summary": answer["messages"][1]["content"][:60]}


EXAMPLES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]]]] = [
    ("**`POST /v1/compact`, decision mode**",
     {"keep_recent": 6, "target_ratio": 0.2, "decision_policy_ir": CHEAPEST_FOUR}, _decision),
    ("**`POST /v1/compact`, seal mode**", {"keep_recent": 4}, _seal),
]


@pytest.mark.parametrize("heading, fields, project", EXAMPLES, ids=["decision", "seal"])
def test_the_readme_shows_what_the_service_answers(url: str, heading: str, fields: dict[str, Any],
                                                   project: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    body = {"messages": json.loads(TRANSCRIPT.read_text(encoding="utf-8")), **fields}
    response = httpx.post(f"{url}/compact", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert matches(shown_answer(heading), project(response.json())) == []


def test_the_readme_names_its_examples_request() -> None:
    """The test sends what the README's jq builds: the same transcript, settings and policy."""
    text = README.read_text(encoding="utf-8")
    assert text.count(str(TRANSCRIPT.relative_to(REPO))) >= 2
    assert re.search(r"keep_recent: 6, target_ratio: 0\.2,", text) and "keep_recent: 4}" in text
    assert '["top_k", 4, ["argmax"]], ["id"],' in text
