"""The HTML report's rows (cli/compactor_cli/html_report.py) say what the compaction did, in every format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compactor.models import CompactRequest
from compactor_cli.compact_cmd import compact_locally
from compactor_cli.html_report import render_html, seal_rows
from compactor_cli.main import main


def anthropic_session(cycles: int) -> list[dict[str, Any]]:
    """A task, ``cycles`` tool calls each answered in the next user turn, and a final answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test in src/app.py"}]
    for i in range(cycles):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"step {i}"},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"command": f"cat src/f{i}.py"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"output {i} " * 200}]})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


def responses_session(cycles: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Fix the failing test"}]
    for i in range(cycles):
        items.append({"type": "function_call", "call_id": f"call_{i}", "name": "shell",
                      "arguments": f'{{"command": "cat src/f{i}.py"}}'})
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": f"output {i} " * 200})
    items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]})
    return items


@pytest.mark.parametrize("items_format, session, frozen", [("anthropic-messages", anthropic_session, 1),
                                                            ("openai-responses", responses_session, 0)])
def test_seal_rows_split_the_items_where_the_seal_of_their_format_did(items_format, session, frozen) -> None:
    # keep_recent=2 reaches into the last tool call's unit: each format's seal takes the whole unit into the tail.
    # ``frozen``: the leading items the format always keeps (an Anthropic transcript's first user message).
    messages = session(6)
    field = "input" if items_format == "openai-responses" else "messages"
    request = CompactRequest.model_validate({"format": items_format, field: messages, "mode": "seal",
                                             "keep_recent": 2, "target_ratio": 0.3})
    record, units = compact_locally(request)
    output = record.body[field]
    # the frozen items, the summary, then the last call, its result and the answer
    assert record.body["compacted"] and len(output) == frozen + 4

    rows = seal_rows(messages, record.body, 2, items_format)

    tail = len(messages) - 3
    assert [(row["start"], row["end"], row["reason"]) for row in rows] == [
        *([(0, frozen, "pinned")] if frozen else []), (frozen, tail, "sealed"), (tail, len(messages), "recent_tail")]
    assert [row["emitted"] for row in rows] == [
        *([output[:frozen]] if frozen else []), output[frozen:frozen + 1], output[frozen + 1:]]
    assert output[frozen + 1:] == messages[-3:]
    assert sum(row["after"] for row in rows) + len(rows) + 1 == record.bytes_out
    page = render_html(messages, record, units, title="session", keep_recent=2, items_format=items_format)
    assert f'data-id="messages_{tail}"' in page


def test_compact_html_of_an_anthropic_seal_shows_the_tail_the_seal_kept(tmp_path) -> None:
    messages = anthropic_session(6)
    source, page = tmp_path / "session.json", tmp_path / "report.html"
    source.write_text(json.dumps({"format": "anthropic-messages", "messages": messages}))
    assert main(["compact", str(source), "--mode", "seal", "--keep-recent", "2", "--target-ratio", "0.3", "-q",
                 "-o", str(tmp_path / "out.json"), "--html", str(page)]) == 0
    html = page.read_text()
    assert f'data-id="messages_{len(messages) - 3}"' in html and f'data-id="messages_{len(messages) - 2}"' not in html
