"""The HTML report of ``compactor compact --html`` loaded in headless Chromium: the DOM says what the JSON says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from compactor.call_record import CallRecord, NodeOutcome
from compactor.compaction.preparation import TAIL_TARGET_SHARE, tail_length
from compactor.transcripts import parse_transcript
from compactor.models import CompactRequest
from compactor_cli.compact_cmd import compact_locally
from compactor_cli.html_report import TEXT_HEAD, TEXT_TAIL, mask_rows, render_html
from compactor_cli.main import main

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"


def dense(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def units(browser: Any) -> list[Any]:
    return browser.find_elements(By.CSS_SELECTOR, "li.unit")


def visible(browser: Any) -> list[str]:
    return [u.get_attribute("data-id") for u in units(browser) if u.is_displayed()]


def test_the_page_shows_every_unit_as_the_json_says(browser: Any, screenshot: Any, tmp_path: Path) -> None:
    body_path, page = tmp_path / "body.json", tmp_path / "report.html"
    assert main(["compact", str(DEMO), "--json", "-q", "-o", str(body_path), "--html", str(page)]) == 0
    body = json.loads(body_path.read_text())
    messages, _ = parse_transcript(DEMO.read_text())
    compaction = body["compaction"]

    browser.get(page.as_uri())

    rows = units(browser)
    assert [r.get_attribute("data-id") for r in rows] == [f["id"] for f in compaction["fragments"]]
    assert [r.get_attribute("data-action") for r in rows] == [f["action"] for f in compaction["fragments"]]
    reasons = [r.get_attribute("data-reason") for r in rows]
    # the default tail: the last 6 messages as far as they fit in their share of the target (docs/differences.md)
    tail = len(messages) - tail_length([dense(m) for m in messages[-6:]],
                                       int(compaction["target_bytes"] * TAIL_TARGET_SHARE))
    assert reasons == [  # the system prompt and the task are pinned; units reaching the tail are protected
        "pinned" if f["end"] <= 2 else "recent_tail" if f["end"] > tail
        else {"summarize": "summarized", "archive": "archived"}.get(f["action"], r)
        for f, r in zip(compaction["fragments"], reasons)]
    assert set(reasons[2:]) - {"recent_tail", "summarized", "archived"} <= {"model_kept", "summary_refused"}
    befores = [int(r.get_attribute("data-before")) for r in rows]
    afters = [int(r.get_attribute("data-after")) for r in rows]
    assert befores == [dense(messages[f["start"]:f["end"]]) - 2 for f in compaction["fragments"]]
    # the units' bytes plus one comma between neighbours and the brackets are the whole output
    assert sum(afters) + sum(1 for a in afters if a) - 1 + 2 == compaction["output_bytes"] == dense(body["messages"])
    headline = browser.find_element(By.ID, "headline").text
    assert f"{compaction['original_bytes']:,}".replace(",", "\u202f") in headline
    assert f"{compaction['output_bytes']:,}".replace(",", "\u202f") in headline
    bars = {b.get_attribute("class").split()[-1]: b.rect["width"] for b in browser.find_elements(By.CSS_SELECTOR, ".fill")}
    assert abs(bars["output"] / bars["before"] - compaction["output_bytes"] / compaction["original_bytes"]) < 0.01
    assert abs(bars["target"] / bars["before"] - compaction["target_bytes"] / compaction["original_bytes"]) < 0.01
    assert ("not met" in browser.find_element(By.ID, "target").text) is not compaction["target_met"]
    assert f"message {compaction['first_changed_index']} is the first" in browser.find_element(By.ID, "first-changed").text
    calls = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] in ("llm", "decision")]
    assert browser.find_element(By.ID, "calls").text.startswith(f"{len(calls)} calls")

    # the first summarized unit, opened from the keyboard, shows its summary beside its original
    first = next(f for f in compaction["fragments"] if f["action"] == "summarize")
    unit = browser.find_element(By.ID, first["id"])
    details = unit.find_element(By.TAG_NAME, "details")
    assert details.get_attribute("open") is None
    toggle = details.find_element(By.TAG_NAME, "summary")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", toggle)
    toggle.send_keys(Keys.ENTER)
    assert details.get_attribute("open") == "true"
    summary_col, original_col = details.find_elements(By.CSS_SELECTOR, ".col")
    summary_message, = [m for m in body["messages"] if m["content"].startswith(f"[Summary of {first['id']};")]
    assert summary_col.find_element(By.TAG_NAME, "pre").text == summary_message["content"]
    assert messages[first["start"]]["role"] in original_col.text.lower()
    assert messages[first["start"]]["tool_calls"][0]["function"]["arguments"] in original_col.text
    screenshot("expanded")

    browser.find_element(By.CSS_SELECTOR, '[data-filter="keep"]').click()
    assert visible(browser) == [f["id"] for f in compaction["fragments"] if f["action"] == "keep"]
    assert browser.find_element(By.CSS_SELECTOR, '[data-filter="keep"]').get_attribute("aria-pressed") == "true"
    browser.find_element(By.CSS_SELECTOR, '[data-filter="all"]').click()
    assert len(visible(browser)) == len(rows)


def test_a_mask_page_shows_each_masked_output_beside_its_placeholder(browser: Any, tmp_path: Path) -> None:
    body_path, page = tmp_path / "body.json", tmp_path / "report.html"
    assert main(["compact", str(DEMO), "--mode", "mask", "--json", "-q", "-o", str(body_path), "--html", str(page)]) == 0
    body = json.loads(body_path.read_text())
    masked = sorted({entry["index"] for entry in body["compaction"]["masked"]})

    browser.get(page.as_uri())

    rows = units(browser)
    assert masked and [int(r.get_attribute("id").split("_")[1]) for r in rows
                       if r.get_attribute("data-reason") == "masked"] == masked
    assert sum(int(r.get_attribute("data-after")) for r in rows) + len(rows) - 1 + 2 == dense(body["messages"])
    first = browser.find_element(By.ID, f"messages_{masked[0]}")
    first.find_element(By.CSS_SELECTOR, "details summary").click()
    assert "omitted by compaction" in first.find_elements(By.CSS_SELECTOR, ".col")[0].text
    assert browser.find_element(By.ID, "cost").text.startswith("none")


def test_archives_fallbacks_and_long_outputs(browser: Any, screenshot: Any, tmp_path: Path) -> None:
    huge = "line of build output\n" * 20_000  # 420 KB: shown as a head and a tail
    messages = [
        {"role": "system", "content": "Be careful."},
        {"role": "user", "content": "Fix the build."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "make"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": huge},
        {"role": "assistant", "content": "An old plan, superseded later."},
        {"role": "assistant", "content": "Done."},
    ]
    summary = {"role": "assistant", "content": "[Summary of fragment_2; original retained by caller]\nmake failed"}
    output = [messages[0], messages[1], summary, messages[5]]
    fallback = {"node": "n7", "kind": "llm", "served_model_id": "cheap-model", "tokens_in": 10, "tokens_out": 2,
                "cost_reported": 0.00001, "latency_ms": 30, "fallback": True, "error": "timeout after 20000 ms",
                "decision_trace": {"decision_path": [{"offer": "acme/cheap", "error_kind": "rate_limit",
                                                      "http_status": 429}]}}
    report = {
        "original_bytes": dense(messages), "output_bytes": dense(output), "target_bytes": 500, "target_ratio": 0.1,
        "target_met": False, "reasons": [], "first_changed_index": 2, "preserved_prefix_bytes": dense(messages[:2]),
        "fragments": []}
    units = [{"id": "fragment_0", "start": 0, "end": 1, "action": "keep", "reason": "pinned"},
             {"id": "fragment_1", "start": 1, "end": 2, "action": "keep", "reason": "pinned"},
             {"id": "fragment_2", "start": 2, "end": 4, "action": "summarize", "reason": "summarized"},
             {"id": "fragment_4", "start": 4, "end": 5, "action": "archive", "reason": "archived"},
             {"id": "fragment_5", "start": 5, "end": 6, "action": "keep", "reason": "recent_tail"}]
    report["fragments"] = [{k: v for k, v in u.items() if k != "reason"} for u in units]
    record = CallRecord(status=200, body={"messages": output, "compacted": True, "compaction": report},
                        mode="decision", bytes_in=report["original_bytes"], bytes_out=report["output_bytes"],
                        cost_usd=0.00001, cost_basis="reported", flow_fingerprint="f",
                        nodes=(NodeOutcome.from_trace(fallback),), report=report)
    page = tmp_path / "report.html"
    html = render_html(messages, record, units, title="synthetic.json", keep_recent=1)
    page.write_text(html, encoding="utf-8")
    assert len(html) < dense(messages) / 20  # the 420 KB output is cut, not copied

    browser.get(page.as_uri())

    assert browser.find_element(By.ID, "fragment_4").get_attribute("data-after") == "0"
    assert "archive" in browser.find_element(By.ID, "fragment_4").text.lower()
    assert "pinned" in browser.find_element(By.ID, "fragment_1").text
    assert "protected tail" in browser.find_element(By.ID, "fragment_5").text
    assert "1 with a fallback" in browser.find_element(By.ID, "calls").text
    browser.find_element(By.CSS_SELECTOR, "details.calls summary").click()
    row = browser.find_element(By.CSS_SELECTOR, "tr.bad").text
    assert "fell back" in row and "acme/cheap: rate_limit (HTTP 429)" in row and "timeout after 20000 ms" in row
    browser.find_element(By.ID, "expand-all").click()
    cut = browser.find_element(By.CSS_SELECTOR, "#fragment_2 .cut").text
    hidden = len(huge.encode()) - len(huge[:TEXT_HEAD].encode()) - len(huge[-TEXT_TAIL:].encode())
    assert cut == f"… {hidden:,} bytes not shown …".replace(",", "\u202f")
    screenshot("expanded")


def test_the_page_is_usable_without_a_mouse_or_eyes(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert main(["compact", str(DEMO), "-q", "-o", str(tmp_path / "out.json"), "--html", str(page)]) == 0
    browser.get(page.as_uri())

    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    assert browser.find_elements(By.TAG_NAME, "main") and browser.find_elements(By.TAG_NAME, "h1")
    for section in browser.find_elements(By.TAG_NAME, "section"):  # every region is named by its heading
        assert browser.find_element(By.ID, section.get_attribute("aria-labelledby")).tag_name == "h2"
    for bars in browser.find_elements(By.CSS_SELECTOR, "[role=img]"):
        assert "bytes" in bars.get_attribute("aria-label")
    assert all(b.text for b in browser.find_elements(By.TAG_NAME, "button"))
    # Tab reaches the skip link first, then the controls, in reading order
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("class") == "skip"
    assert not browser.find_elements(By.CSS_SELECTOR, "script[src], link[href], img[src]")  # nothing fetched


def test_a_page_of_many_units_filters_its_pages_and_lines(browser: Any, tmp_path: Path) -> None:
    # Past FULL_ROWS units each is one line in closed pages (docs/report.md "Large transcripts"): a filter hides the
    # lines and the pages without its action; expand all opens only the pages that hold it.
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix it."}]
    for i in range(1500):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f'{{"cmd": "make {i}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i}\n" * 30})
    page = tmp_path / "report.html"
    record, units_ = compact_locally(CompactRequest.model_validate(
        {"messages": messages, "mode": "mask", "target_ratio": 0.5}))
    page.write_text(render_html(messages, record, units_, title="run.json", keep_recent=6), encoding="utf-8")
    masked = sorted({entry["index"] for entry in record.report["masked"]})

    browser.get(page.as_uri())

    pages = browser.find_elements(By.CSS_SELECTOR, "details.page")
    assert len(pages) > 1 and not any(p.get_attribute("open") for p in pages)
    assert len(browser.find_elements(By.CSS_SELECTOR, ".lines > li")) == len(mask_rows(messages, record.body, record.report))
    browser.find_element(By.CSS_SELECTOR, '[data-filter="summarize"]').click()
    shown = [p for p in pages if p.is_displayed()]
    assert shown == [p for p in pages if "has-summarize" in p.get_attribute("class")]
    browser.find_element(By.ID, "expand-all").click()
    assert all(p.get_attribute("open") for p in shown)
    shown_lines = browser.execute_script(  # one call: a round trip for each of 3 000 lines takes half a minute
        "return Array.from(document.querySelectorAll('.lines > li')).filter(function (u) {"
        " return u.getClientRects().length; }).map(function (u) { return u.id; });")
    assert [int(i.split("_")[1]) for i in shown_lines] == masked
    line = browser.find_element(By.ID, f"messages_{masked[0]}").text
    assert "masked" in line and "omitted by compaction" in line and "output" in line
    browser.find_element(By.CSS_SELECTOR, '[data-filter="archive"]').click()  # a mask run archives nothing
    assert not any(p.is_displayed() for p in pages)
    browser.find_element(By.CSS_SELECTOR, '[data-filter="all"]').click()
    assert all(p.is_displayed() for p in pages)
    browser.find_element(By.ID, "collapse-all").click()
    assert not any(p.get_attribute("open") for p in pages)
    # a link to a unit opens the page that holds it (the browser reveals a closed <details> holding the target)
    browser.get(page.as_uri() + f"#messages_{masked[-1]}")
    assert [p.get_attribute("open") for p in browser.find_elements(By.CSS_SELECTOR, "details.page")].count("true") == 1
    assert browser.find_element(By.ID, f"messages_{masked[-1]}").is_displayed()


def many_items_page(tmp_path: Path) -> Path:
    """A mask page of 3 000 items: 15 closed pages of lines."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix it."}]
    for i in range(1500):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f'{{"cmd": "make {i}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i}\n" * 30})
    record, units_ = compact_locally(CompactRequest.model_validate(
        {"messages": messages, "mode": "mask", "target_ratio": 0.5}))
    page = tmp_path / "report.html"
    page.write_text(render_html(messages, record, units_, title="run.json", keep_recent=6), encoding="utf-8")
    return page


LAID_OUT = """return Array.from(document.querySelectorAll('details.page')).map(function (page) {
  return page.querySelector('.lines > li').checkVisibility({contentVisibilityAuto: true}); });"""
"""For each page, whether the browser lays out its lines (false: closed, or open and skipped as off screen)."""


def test_expand_all_lays_out_only_the_pages_on_screen(browser: Any, tmp_path: Path) -> None:
    # Expand all opened every page and the browser laid out every line at once: 1.0 s at 10 000 units, where it had
    # taken 0.14 s before the lines were paged. An open page off screen is skipped now (content-visibility), so the
    # click lays out what the window shows; the rest is laid out as it is scrolled to, and found and linked to as before.
    page = many_items_page(tmp_path)
    browser.get(page.as_uri())
    assert not any(browser.execute_script(LAID_OUT))

    browser.find_element(By.ID, "expand-all").click()

    pages = browser.find_elements(By.CSS_SELECTOR, "details.page")
    assert all(p.get_attribute("open") for p in pages)
    laid_out = browser.execute_script(LAID_OUT)
    assert laid_out[0] and not any(laid_out[-5:])
    # a link to a unit of an open page off screen brings it into view, laid out
    target = browser.find_elements(By.CSS_SELECTOR, ".lines > li")[-3].get_attribute("id")
    browser.get(page.as_uri() + "#" + target)
    browser.execute_script("return new Promise(function (done) { requestAnimationFrame(function () {"
                           " requestAnimationFrame(done); }); })")
    assert all(p.get_attribute("open") for p in pages) and browser.execute_script(LAID_OUT)[-1]
    top = browser.execute_script("return document.getElementById(arguments[0]).getBoundingClientRect().top", target)
    assert 0 <= top < browser.execute_script("return innerHeight")
    assert browser.find_element(By.ID, target).text.startswith("msg ")


def test_a_lines_cut_summary_opens_whole(browser: Any, tmp_path: Path) -> None:
    # Past FULL_ROWS units a line shows 400 characters of a summary; the rest was nowhere on the page. The cut text is
    # the toggle of a closed <details> holding the whole summary.
    from unit.cli.test_html_report_large import decision_page

    summary = "[Summary of fragment_3; original retained by caller]\n" + "".join(
        f"step {i}: ran make and read the output\n" for i in range(40)) + "END-OF-SUMMARY"
    html, _ = decision_page({3: summary})
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    browser.get(page.as_uri() + "#fragment_3")

    line = browser.find_element(By.ID, "fragment_3")
    details = line.find_element(By.TAG_NAME, "details")
    assert details.get_attribute("open") is None and "END-OF-SUMMARY" not in line.text
    assert line.find_element(By.TAG_NAME, "summary").text.endswith("…")
    line.find_element(By.TAG_NAME, "summary").click()
    assert details.get_attribute("open") == "true"
    assert line.find_element(By.TAG_NAME, "pre").text == summary
