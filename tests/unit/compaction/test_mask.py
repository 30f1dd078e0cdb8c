"""``mask`` mode: old tool outputs become placeholders naming their call; no model call; never grows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from compactor import service
from compactor.budget import Deadline
from compactor.compaction import modes
from compactor.compaction.mask import mask, placeholder
from compactor.compaction.units import is_text_observation
from compactor.jsonutil import dense_size
from compactor.models import CompactRequest
from compactor.transcripts import parse_transcript

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
BIG = "x" * 2000


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]}


def result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


MESSAGES = [
    {"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
    call("c1", "bash"), result("c1", BIG), call("c2", "read_file"), result("c2", "ok"),
    call("c3", "grep"), result("c3", BIG), {"role": "assistant", "content": "done"},
]


class NoModel:
    """A router that fails the test if anything asks it for a model call."""

    def admit_policy(self, term: Any) -> Any:
        raise AssertionError("mask admits no policy")

    async def chat(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("mask makes no model call")

    async def decide(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("mask makes no model call")


def run(**fields: Any) -> tuple[int, dict[str, Any]]:
    request = CompactRequest.model_validate({"mode": "mask", **fields})
    return asyncio.run(service.compact(request, deadline=Deadline.after_ms(10_000), router=NoModel()))


def test_old_tool_outputs_become_placeholders_naming_the_call() -> None:
    status, body = run(messages=MESSAGES, keep_recent=2)
    assert status == 200 and body["compacted"] is True
    out = body["messages"]
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": placeholder("bash", "c1", dense_size(BIG))}
    assert "bash" in out[3]["content"] and "c1" in out[3]["content"]
    assert out[5] == MESSAGES[5]  # "ok" is smaller than any placeholder: kept, the transcript never grows
    assert out[7] == MESSAGES[7]  # inside the protected tail (keep_recent=2)
    assert [m for i, m in enumerate(out) if i != 3] == [m for i, m in enumerate(MESSAGES) if i != 3]
    report = body["compaction"]
    assert report["mode"] == "mask" and report["masked"] == [
        {"index": 3, "tool_call_id": "c1", "name": "bash", "original_bytes": dense_size(BIG)}]
    assert (report["original_bytes"], report["output_bytes"]) == (dense_size(MESSAGES), dense_size(out))
    assert report["first_changed_index"] == 3
    assert set(body) == {"messages", "compacted", "compaction"}  # no x_router, no usage: no model call


def test_pins_protect_and_must_exist() -> None:
    _, body = run(messages=MESSAGES, keep_recent=1, pinned_indices=[3])
    assert body["messages"][3] == MESSAGES[3] and body["messages"][7] != MESSAGES[7]
    status, body = run(messages=MESSAGES, pinned_indices=[99])
    assert status == 400 and body["error"]["message"] == modes.PINS_MESSAGE


@pytest.mark.parametrize("junk", [None, 5, "x", [1]])
def test_a_call_that_is_not_an_object_is_kept_and_the_rest_is_masked(junk: Any) -> None:
    # Such a call was read with .get() before its type was checked: a 500 in mask mode alone.
    messages = [*MESSAGES[:2], {"role": "assistant", "content": None, "tool_calls": [junk]}, *MESSAGES[2:]]
    status, body = run(messages=messages, keep_recent=2)
    assert status == 200 and body["compacted"]
    assert body["messages"][2] == messages[2]
    assert "(call c1)" in body["messages"][4]["content"]


def test_nothing_to_mask_is_unchanged() -> None:
    status, body = run(messages=MESSAGES[:2])
    assert status == 200 and body["messages"] == MESSAGES[:2] and body["compacted"] is False
    assert body["compaction"]["masked"] == [] and body["compaction"]["first_changed_index"] is None


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json*")), ids=lambda p: p.stem[:40])
def test_corpus_never_grows_and_keeps_every_message(path: Path) -> None:
    messages, _ = parse_transcript(path.read_text(encoding="utf-8"))
    output, masked = mask(messages, keep_recent=6, pinned_indices=None)
    assert len(output) == len(messages) and dense_size(output) <= dense_size(messages)
    assert all(output[i] == messages[i] for i in range(len(messages)) if i not in {m.index for m in masked})
    assert all(messages[m.index]["role"] in ("tool", "user") and m.index < len(messages) - 6 for m in masked)
    assert all(json.loads(json.dumps(output[m.index]))["content"].startswith(("[output of ", "[tool output omitted"))
               for m in masked)
    assert all(messages[m.index]["role"] != "user" or is_text_observation(messages, m.index) for m in masked)
    if any(m.get("role") == "tool" and len(str(m.get("content"))) > 500 for m in messages[:-6]):
        assert masked and dense_size(output) < dense_size(messages)


def test_a_text_agents_old_observations_are_masked_its_task_is_not() -> None:
    observation = "<returncode>0</returncode>\n<output>\n" + BIG + "\n</output>"
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix the bug " + BIG},
                {"role": "assistant", "content": "ls"}, {"role": "user", "content": observation},
                {"role": "assistant", "content": "cat x"}, {"role": "user", "content": observation},
                {"role": "assistant", "content": "done"}]
    _, body = run(messages=messages, keep_recent=2)
    out = body["messages"]
    assert out[1] == messages[1]  # the task: a genuine user input, pinned by default
    assert out[3]["content"] == placeholder(None, None, dense_size(observation))
    assert out[5] == messages[5]  # in the tail
    assert [m["index"] for m in body["compaction"]["masked"]] == [3]


def test_anthropic_tool_results_are_masked_in_their_own_shape() -> None:
    messages = [{"role": "user", "content": "task"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": BIG}]},
                {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
                # a new human turn: the tool cycle is no longer in the turn in progress, whose last two units
                # every mode protects (docs/formats.md "Hidden reasoning")
                {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "ok"}]
    status, body = run(messages=messages, keep_recent=1, format="anthropic-messages")
    assert status == 200
    block = body["messages"][2]["content"][0]
    assert block == {"type": "tool_result", "tool_use_id": "t1", "content": placeholder("Read", "t1", dense_size(BIG))}
    assert body["messages"][:2] == messages[:2] and body["messages"][3] == messages[3]


def test_responses_outputs_are_masked_under_input() -> None:
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "task"}]},
             {"type": "function_call", "call_id": "f1", "name": "shell", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "f1", "output": BIG},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]
    status, body = run(input=items, keep_recent=1, format="openai-responses")
    assert status == 200 and "messages" not in body
    assert body["input"][2] == {"type": "function_call_output", "call_id": "f1",
                                "output": placeholder("shell", "f1", dense_size(BIG))}
    assert body["compaction"]["masked"][0]["name"] == "shell"


def test_a_huge_tool_name_is_cut_in_the_placeholder_and_the_report() -> None:
    """A transcript's names are untrusted: the placeholder and the report's ``masked`` entry name the tool in at most
    128 characters, the last one ``…``, as the reports do. Before, a 1 MB tool name made every placeholder naming it
    1 MB: none was smaller than its output, so nothing was masked (and each masked entry repeated the name)."""
    name = "n" * 1_000_000
    messages = [{"role": "user", "content": "task"}, call("c1", name), result("c1", BIG), call("c2", name),
                result("c2", BIG), {"role": "assistant", "content": "done"}]
    status, body = run(messages=messages, keep_recent=1)
    assert status == 200
    cut = "n" * 127 + "…"
    assert [m["content"] for m in body["messages"] if m["role"] == "tool"] == [
        f"[output of {cut} (call {c}) omitted by compaction: {dense_size(BIG)} bytes]" for c in ("c1", "c2")]
    assert [m["name"] for m in body["compaction"]["masked"]] == [cut, cut]
