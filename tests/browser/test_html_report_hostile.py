"""A hostile transcript's page in headless Chromium: its text is shown, never run, never hidden, never reordering the
page's own words (docs/report.md, "Untrusted text")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

from compactor_cli.html_report import render_html
from fakes.report_records import kept_record

SCRIPT = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"><svg onload="window.pwned=3"></svg>'


def test_a_bidi_override_in_a_tool_name_shows_as_a_mark_and_reorders_nothing(browser: Any, tmp_path: Path) -> None:
    name = "bash\u202e" + SCRIPT  # RIGHT-TO-LEFT OVERRIDE: it reversed " + 1 result" after it on the page
    messages = [{"role": "user", "content": "Fix it. nul\x00byte tag\U000e0049\U000e0047\U000e004e end"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": name, "arguments": SCRIPT}}]},
                {"role": "tool", "tool_call_id": "c1", "content": SCRIPT}]
    units = [{"id": "fragment_0", "start": 0, "end": 1, "action": "keep", "reason": "pinned"},
             {"id": "fragment_1", "start": 1, "end": 3, "action": "keep", "reason": "recent_tail"}]
    record = kept_record(messages, units)
    page = tmp_path / "report.html"
    page.write_text(render_html(messages, record, units, title="t\u202e.json", keep_recent=2), encoding="utf-8")

    browser.get(page.as_uri())

    assert browser.execute_script("return window.pwned") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "main img, main svg, main script")
    who = browser.find_element(By.CSS_SELECTOR, "#fragment_1 .who")
    # where the words after the name are drawn: "+" before "1" before "result", left to right
    xs = browser.execute_script("""
        var who = arguments[0], walker = document.createTreeWalker(who, NodeFilter.SHOW_TEXT), node, last;
        while ((node = walker.nextNode())) { last = node; }
        var text = last.data, out = [];
        ['+', '1', 'result'].forEach(function (word) {
          var range = document.createRange(), at = text.lastIndexOf(word);
          range.setStart(last, at); range.setEnd(last, at + word.length);
          out.push(range.getBoundingClientRect().left);
        });
        return out;""", who)
    assert xs == sorted(xs), xs
    assert "U+202E" in who.text
    assert "U+202E" in browser.title
    browser.find_element(By.CSS_SELECTOR, "#fragment_0 summary").click()
    shown = browser.find_element(By.CSS_SELECTOR, "#fragment_0 pre").text
    assert shown == "Fix it. nulU+0000byte tagU+E0049U+E0047U+E004E end"


def test_markup_that_slipped_through_would_neither_run_nor_load(browser: Any, tmp_path: Path) -> None:
    # The page's Content Security Policy: should a change ever let a transcript's markup through unescaped, its
    # script, its event handlers and its loads are refused; the page's own script (allowed by its hash) still runs.
    messages = [{"role": "user", "content": "Fix it."}, {"role": "assistant", "content": "Done."}]
    units = [{"id": "fragment_0", "start": 0, "end": 1, "action": "keep", "reason": "pinned"},
             {"id": "fragment_1", "start": 1, "end": 2, "action": "keep", "reason": "recent_tail"}]
    record = kept_record(messages, units)
    html = render_html(messages, record, units, title="t.json", keep_recent=1)
    slipped = (SCRIPT + '<img id="remote" src="http://127.0.0.1:9/x.png" onerror="window.pwned=4">'
               '<a id="link" href="javascript:window.pwned=5">x</a>')
    page = tmp_path / "report.html"
    page.write_text(html.replace("</main>", slipped + "</main>", 1), encoding="utf-8")

    browser.get(page.as_uri())
    browser.find_element(By.ID, "link").click()

    assert browser.execute_script("return window.pwned") is None
    browser.find_element(By.CSS_SELECTOR, '[data-filter="keep"]').click()  # the page's own script runs
    assert browser.find_element(By.CSS_SELECTOR, '[data-filter="keep"]').get_attribute("aria-pressed") == "true"
