"""The HTML report of a transcript of many items (docs/report.md "Large transcripts"): past FULL_ROWS units, one line
per unit in closed pages, so that the page is smaller than the transcript and every unit is still on it."""

from __future__ import annotations

import re
from html import escape, unescape
from typing import Any

from compactor.jsonutil import dense_size
from compactor.models import CompactRequest
from compactor_cli.compact_cmd import compact_locally
from compactor_cli.html_report import FULL_ROWS, LINE_EMITTED, PAGE_ROWS, mask_rows, render_html
from fakes.report_records import kept_record


def items(count: int, name: str = "bash") -> list[dict[str, Any]]:
    """A task, then tool calls each answered by a short output (~280 bytes an item, as a long agent run has)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Fix the build."}]
    i = 0
    while len(messages) < count:
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function", "function": {"name": name, "arguments": f'{{"cmd": "make {i}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i:06d} src/pkg/m{i % 97}.py ok\n" * 12})
        i += 1
    return messages


def mask_page(messages: list[dict[str, Any]]) -> tuple[str, Any]:
    record, units = compact_locally(CompactRequest.model_validate(
        {"messages": messages, "mode": "mask", "target_ratio": 0.5}))
    return render_html(messages, record, units, title="run.json", keep_recent=6), record


def test_a_mask_page_of_many_items_is_smaller_than_the_transcript_and_lists_every_unit() -> None:
    # Each unit was a full row (bars, explanation, original and placeholder side by side): about 1 KB an item, so a
    # 10 000-item mask page was 4.5 times its transcript and Chromium took a minute to filter it.
    messages = items(3000)
    page, record = mask_page(messages)
    rows = mask_rows(messages, record.body, record.report)
    assert len(rows) > FULL_ROWS

    assert len(page.encode()) <= dense_size(messages)
    assert re.findall(r'<li class=[ksa] id="(messages_\d+)"', page) == [row["id"] for row in rows]
    assert "details class=\"pair\"" not in page  # no full rows
    pages = re.findall(r'<details class="page ([\w -]+)"><summary>msg (\d+)–(\d+) · ([^<]*)</summary>', page)
    assert len(pages) == -(-len(rows) // PAGE_ROWS)
    assert [(int(start), int(end)) for _, start, end, _ in pages] == [
        (rows[i]["start"], rows[min(i + PAGE_ROWS, len(rows)) - 1]["end"] - 1) for i in range(0, len(rows), PAGE_ROWS)]
    # each page's summary adds up its units' bytes, and names the actions its filter classes say it holds
    for (classes, _, _, what), first in zip(pages, range(0, len(rows), PAGE_ROWS)):
        chunk = rows[first:first + PAGE_ROWS]
        before = f"{sum(r['before'] for r in chunk):,}".replace(",", "\u202f")
        after = f"{sum(r['after'] for r in chunk):,}".replace(",", "\u202f")
        assert what.endswith(f"{before} B → {after} B")
        assert set(classes.split()) == {f"has-{r['action']}" for r in chunk}
    # a masked output's line: its reason, its bytes, its placeholder and the start of its original
    masked = next(r for r in rows if r["reason"] == "masked")
    line = re.search(rf'<li class=s id="{masked["id"]}">(.*?)(?=<li|</ol>)', page).group(1)
    assert "<code>masked</code>" in line and f"{masked['before']} → {masked['after']} B" in line
    assert "omitted by compaction" in line and messages[masked["start"]]["content"][:20] in line


def test_a_page_of_few_units_still_shows_each_in_full() -> None:
    messages = items(FULL_ROWS - 100)
    page, record = mask_page(messages)
    assert len(mask_rows(messages, record.body, record.report)) <= FULL_ROWS
    assert 'details class="pair"' in page and '<details class="page' not in page


def test_a_units_line_shows_hostile_text_as_text() -> None:
    name = "<script>window.pwned=1</script>\u202e"
    page, _ = mask_page(items(3000, name=name))
    assert page.count("<script>") == 1  # the page's own
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page and "\u202e" not in page.split("<title>")[1]


def test_a_units_line_gives_the_deciders_reason() -> None:
    messages = items(2 * FULL_ROWS + 10)
    units = [{"id": f"fragment_{i}", "start": i, "end": i + 1, "action": "keep", "reason": "model_kept",
              **({"decider_reason": "still needed <b>later</b>"} if i == 7 else {})} for i in range(len(messages))]
    page = render_html(messages, kept_record(messages, units), units, title="run.json", keep_recent=2)
    line = re.search(r'<li class=k id="fragment_7">(.*?)(?=<li|</ol>)', page).group(1)
    assert "(decider: still needed &lt;b&gt;later" in line


def small(count: int) -> list[dict[str, Any]]:
    """Tool calls each answered by a ~180-byte output: items of ~200 bytes, smaller than a line used to be."""
    messages = items(count)
    for message in messages:
        if message["role"] == "tool":
            message["content"] = message["content"][:180]
    return messages


def test_a_line_costs_little_more_than_its_texts() -> None:
    # A line repeated its markup (class="unit summarize", a <bdi> around every plain name, <samp class="e">, &quot;
    # for each quote, "tool + 1 result" for one tool message, "143 → 143 B", </li>): 126 bytes of markup a line, so a
    # mask page of ~200-byte items was 1.2 times its transcript.
    messages = small(3000)
    page, _ = mask_page(messages)
    lists = "".join(re.findall(r'<ol class="units lines"[^>]*>(.*?)</ol>', page))
    lines = re.findall(r"<li[ >]", lists)
    markup = len(lists.encode()) - len(unescape(re.sub(r"<[^>]+>", "", lists)).encode())

    assert len(lines) > FULL_ROWS and markup / len(lines) <= 80
    assert len(page.encode()) <= dense_size(messages)
    assert "&quot;" not in lists and "<bdi>" not in lists and " + 1 result" not in lists
    assert '<li class=k id="messages_4"><b>msg 4</b> assistant → bash <code>not_masked</code> 143 B <small>' \
           '{"cmd": "make 1"}</small><li class=s id="messages_5">' in lists


def decision_page(summaries: dict[int, str]) -> tuple[str, list[dict[str, Any]]]:
    """A decision page of many one-message units, those in ``summaries`` summarized into the text given."""
    from compactor.call_record import CallRecord

    messages = items(2 * FULL_ROWS + 10)
    units, output = [], []
    for i, message in enumerate(messages):
        action = "summarize" if i in summaries else "keep"
        units.append({"id": f"fragment_{i}", "start": i, "end": i + 1, "action": action,
                      "reason": "summarized" if i in summaries else "model_kept"})
        output.append({"role": "assistant", "content": summaries[i]} if i in summaries else message)
    report = {"original_bytes": dense_size(messages), "output_bytes": dense_size(output), "target_bytes": 10,
              "target_ratio": 0.1, "target_met": False, "reasons": [], "first_changed_index": min(summaries),
              "preserved_prefix_bytes": 0, "fragments": [{k: v for k, v in u.items() if k != "reason"} for u in units]}
    record = CallRecord(status=200, body={"messages": output, "compacted": True, "compaction": report},
                        mode="decision", bytes_in=dense_size(messages), bytes_out=dense_size(output), report=report)
    return render_html(messages, record, units, title="run.json", keep_recent=2), units


def test_a_lines_cut_summary_is_completed_on_demand() -> None:
    # A line showed a summary's first 400 characters and the rest was nowhere on the page; a summary whose first 401
    # characters held a run of white space lost the words after it without even an ellipsis.
    long = "[Summary of fragment_3; original retained by caller]\n" + "".join(
        f"step {i}: ran <make> & read \"out\"\n" for i in range(40)) + "END-OF-SUMMARY"
    spaced = "[Summary of fragment_5; original retained by caller]" + " " * 500 + "\nHIDDEN-AFTER-SPACES"
    page, _ = decision_page({3: long, 5: spaced, 7: "[Summary of fragment_7; original retained by caller] short"})

    def line(number: int) -> str:
        return re.search(rf'<li class=s id="fragment_{number}">(.*?)(?=<li|</ol>)', page, re.S).group(1)

    head = " ".join(long.split())[:LINE_EMITTED]
    assert (f"<details><summary><samp>{escape(head, quote=False)}…</samp></summary>"
            f"<pre>{escape(long, quote=False)}</pre></details>") in line(3)
    assert "retained by caller] HIDDEN-AFTER-SPACES</samp>" in line(5)  # whole once its white space is one space
    assert "<details>" not in line(7) and "<samp>[Summary of fragment_7; original retained by caller] short</samp>" in line(7)
