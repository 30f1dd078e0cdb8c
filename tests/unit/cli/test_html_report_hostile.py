"""The HTML report (cli/compactor_cli/html_report.py) against hostile transcripts, and its figures against the run's.

A transcript's text, its tool names and call ids, a model's words and a file's name are untrusted: the page shows
them as text, never as markup, never hidden, and never reordering the page's own words (docs/report.md).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from compactor.call_record import CallRecord, NodeOutcome
from compactor_cli import html_report
from compactor_cli.html_report import render_html
from compactor_cli.main import main

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
TRANSCRIPT = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"

pytestmark = pytest.mark.usefixtures("bundled_catalog")

HOSTILE = ['<script>alert(1)</script>', '</script><script>alert(2)</script>', '</style><img src=x onerror=alert(3)>',
           '"><img src=x onerror=alert(4)>', "'><svg onload=alert(5)>", '<a href="javascript:alert(6)">x</a>',
           '<link rel=stylesheet href=http://example.invalid/x.css>', '<style>body{display:none}</style>',
           '<!--', '<iframe src=//example.invalid>', '{title}']
BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: the text after it, up to the end of its paragraph, is shown reversed
HIDDEN = ["nul\x00byte", "esc\x1b[31m", "zero\u200bwidth", "bom\ufeff", "tag\U000e0049\U000e0047\U000e004e",
          "isolate\u2067x", "line\u2028sep", "selector\U000e0101"]


class Tags(HTMLParser):
    """Every element and attribute of a page, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def dense(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def hostile_page() -> tuple[str, list[dict[str, Any]]]:
    """A decision page whose every untrusted field holds markup, a bidi override and invisible characters."""
    evil = " ".join(HOSTILE + HIDDEN) + BIDI
    messages = [
        {"role": "system", "content": "Be careful. " + evil},
        {"role": "user", "content": "Fix the build. " + evil},
        {"role": "assistant", "content": evil, "tool_calls": [
            {"id": 'c1"><b>', "type": "function", "function": {"name": "bash" + BIDI + evil, "arguments": evil}}]},
        {"role": "tool", "tool_call_id": 'c1"><b>', "content": evil * 3},
        {"role": "assistant", "content": "Done. " + evil},
    ]
    summary = {"role": "assistant", "content": "[Summary of fragment_2; original retained by caller]\n" + evil}
    output = [messages[0], messages[1], summary, messages[4]]
    node = {"node": "n7", "kind": "llm", "served_model_id": "model" + evil, "tokens_in": 10, "tokens_out": 2,
            "cost_reported": 0.0, "latency_ms": 30, "fallback": True, "error": "provider said: " + evil,
            "decision_trace": {"decision_path": [{"offer": "acme/" + evil, "error_kind": "rate_limit"}]}}
    units = [{"id": "fragment_0", "start": 0, "end": 1, "action": "keep", "reason": "pinned"},
             {"id": "fragment_1", "start": 1, "end": 2, "action": "keep", "reason": "pinned"},
             {"id": "fragment_2", "start": 2, "end": 4, "action": "summarize", "reason": "summarized",
              "decider_reason": "bulky" + evil[:50]},
             {"id": "fragment_4", "start": 4, "end": 5, "action": "keep", "reason": "recent_tail"}]
    report = {"original_bytes": dense(messages), "output_bytes": dense(output), "target_bytes": 100,
              "target_ratio": 0.1, "target_met": False, "reasons": [], "first_changed_index": 2,
              "preserved_prefix_bytes": dense(messages[:2]),
              "fragments": [{k: v for k, v in u.items() if k not in ("reason", "decider_reason")} for u in units]}
    record = CallRecord(status=200, body={"messages": output, "compacted": True, "compaction": report},
                        mode="decision", bytes_in=report["original_bytes"], bytes_out=report["output_bytes"],
                        cost_usd=0.0, cost_basis="reported", flow_fingerprint="f",
                        nodes=(NodeOutcome.from_trace(node),), report=report)
    return render_html(messages, record, units, title="session" + evil + ".json", keep_recent=1), messages


def test_hostile_text_never_becomes_markup() -> None:
    page, _ = hostile_page()
    parser = Tags()
    parser.feed(page)

    tags = [tag for tag, _ in parser.tags]
    assert tags.count("script") == 1 and tags.count("style") == 1  # the page's own
    assert not {"img", "svg", "iframe", "link", "object", "embed", "base", "form"} & set(tags)
    assert all(not name.startswith("on") for _, attrs in parser.tags for name in attrs)
    assert [attrs["href"] for tag, attrs in parser.tags if tag == "a"] == ["#units"]  # the skip link only
    text = "".join(parser.text)
    assert text.count("<script>alert(1)</script>") >= 5  # shown as text wherever it was


def test_invisible_characters_are_shown_as_marks_not_hidden() -> None:
    # A NUL was dropped by the HTML parser, tag characters (text a model reads and a person does not see) and
    # zero-width characters showed nothing, and a bidi override reversed the text after it: the page hid them.
    page, _ = hostile_page()

    assert not html_report.INVISIBLE.search(page)
    for mark in ("U+0000", "U+001B", "U+200B", "U+FEFF", "U+E0049", "U+2067", "U+2028", "U+E0101", "U+202E"):
        assert f'<span class="cc">{mark}</span>' in page
    assert "<title>Compaction report: session" in page and "[U+202E]" in page.split("</title>")[0]


def test_every_bidi_control_and_hidden_character_is_marked() -> None:
    # the characters a person reading the page could be misled by: every control but tab and line ends, every
    # explicit bidi formatting character, and the invisible format characters (the zero-width joiners stay)
    bidi_controls = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI", "LRM", "RLM", "ALM"}
    for code in range(0x110000):
        char = chr(code)
        category = unicodedata.category(char)
        must = ((category == "Cc" and char not in "\t\n\r") or unicodedata.bidirectional(char) in bidi_controls
                or category in ("Cs", "Zl", "Zp") or 0xE0000 <= code <= 0xE007F
                or char in "\u00ad\u180e\u200b\u2060\ufeff")
        if must:
            assert html_report.INVISIBLE.fullmatch(char), f"U+{code:04X} is not marked"
    assert not html_report.INVISIBLE.search("\t\n\r\u200c\u200d\ufe0f é 漢字 שלום")


def test_untrusted_names_are_isolated_from_the_pages_words() -> None:
    # A right-to-left tool name reordered the words after it ("× 2", "+ 1 result"): each name that could hold
    # right-to-left text is a <bdi>.
    page, _ = hostile_page()
    who = re.search(r'<span class="who">(.*?)</span><span class="action', page.split('data-id="fragment_2"')[1]).group(1)
    assert who.startswith("assistant → <bdi>bash<span class=\"cc\">U+202E</span>")  # ASCII needs no <bdi>
    assert who.endswith("</bdi> + 1 result")
    # text that is all ASCII once its invisible characters are marks holds no right-to-left letter: no <bdi> needed
    assert '<span class="file">session&lt;script&gt;alert(1)&lt;/script&gt;' in page
    assert html_report._inline("make \u05e9\u05dc\u05d5\u05dd") == "<bdi>make \u05e9\u05dc\u05d5\u05dd</bdi>"
    assert "(the decider's reason: bulky&lt;script&gt;" in page
    assert "<br><small>acme/&lt;script&gt;" in page


def test_a_file_name_that_is_not_utf8_gets_its_page(tmp_path: Path) -> None:
    # A name's undecodable bytes reach Python as lone surrogates: writing the page raised UnicodeEncodeError (a
    # traceback after the compaction, the page cut short and --output never written). They read \xNN now, as in
    # compactor eval; a lone surrogate that reached the page any other way would be a U+XXXX mark.
    source = tmp_path / os.fsdecode(b"session-\xff.json")
    source.write_bytes(TRANSCRIPT.read_bytes())
    page, out = tmp_path / "report.html", tmp_path / "out.json"

    assert main(["compact", str(source), "-q", "-o", str(out), "--html", str(page)]) == 0

    html = page.read_text(encoding="utf-8")
    assert '<span class="file">session-\\xff.json</span>' in html
    assert out.exists()


def test_the_page_allows_its_own_script_and_nothing_else() -> None:
    # The Content Security Policy (docs/report.md): the second wall behind the escaping, checked in Chromium by
    # tests/browser/test_html_report_hostile.py; here, that it names the script the page holds.
    import base64
    import hashlib

    page, _ = hostile_page()
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page.split("<style>")[0])
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert policy and policy.group(1).split("; ") == [
        "default-src 'none'", "style-src 'unsafe-inline'", f"script-src 'sha256-{digest}'", "base-uri 'none'",
        "form-action 'none'"]


def test_the_text_report_writes_a_transcripts_escape_sequences_as_text(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # --show-summaries wrote a tool output's escape sequences to the terminal as they were: they erased the report's
    # lines above, set the window's title and printed a forged "compacted:" line in their place.
    forged = "\x1b[2K\x1b[1A" * 3 + "\x1b]0;pwned\x07\rcompacted: 1 -> 1 bytes\u202e\n"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(6):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": forged + "real output line\n" * 300})
    messages.append({"role": "assistant", "content": "done"})
    source = tmp_path / "t.json"
    source.write_text(json.dumps(messages))

    assert main(["compact", str(source), "--show-summaries", "2", "-o", str(tmp_path / "out.json")]) == 0

    report = capsys.readouterr().err
    assert "summary:" in report and not html_report.INVISIBLE.search(report) and "\r" not in report
    assert "  tool: \\x1b[2K\\x1b[1A" in report and "\\x1b]0;pwned\\x07 compacted: 1 -> 1 bytes\\u202e real" in report


def test_a_huge_tool_name_is_cut_in_both_reports() -> None:
    # A transcript's tool name is as untrusted as its text: a 1 MB name was shown in full in the unit's head, in its
    # call and in --show-summaries; the reports cut it as a provider's model id is cut.
    from compactor_cli.report import NAME_CHARS, render_examples

    name = "x" * 1_000_000
    messages = [{"role": "user", "content": "Fix it."},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "y" * 1_000_000, "content": "odd role"}]
    summary = {"role": "assistant", "content": "[Summary of fragment_1; original retained by caller]\nran it"}
    output = [messages[0], summary, messages[3]]
    units = [{"id": "fragment_0", "start": 0, "end": 1, "action": "keep", "reason": "pinned"},
             {"id": "fragment_1", "start": 1, "end": 3, "action": "summarize", "reason": "summarized"},
             {"id": "fragment_3", "start": 3, "end": 4, "action": "keep", "reason": "recent_tail"}]
    report = {"original_bytes": dense(messages), "output_bytes": dense(output), "target_bytes": 100,
              "target_ratio": 0.1, "target_met": False, "reasons": [], "first_changed_index": 1,
              "preserved_prefix_bytes": dense(messages[:1]),
              "fragments": [{k: v for k, v in u.items() if k != "reason"} for u in units]}
    body = {"messages": output, "compacted": True, "compaction": report}
    record = CallRecord(status=200, body=body, mode="decision", bytes_in=report["original_bytes"],
                        bytes_out=report["output_bytes"], report=report)

    page = render_html(messages, record, units, title="t.json", keep_recent=1)
    text = render_examples(messages, body, units, 1)

    cut = "x" * (NAME_CHARS - 1) + "…"
    assert len(page) < 50_000 and "x" * NAME_CHARS not in page and "y" * NAME_CHARS not in page
    assert f"<bdi>{cut}</bdi>" in page.split('data-id="fragment_1"')[1].split("</li>")[0]
    assert len(text) < 5_000 and f"  call {cut}: {{}}" in text


def test_a_custom_tools_call_is_shown_by_its_name_and_input_in_both_reports() -> None:
    # A Chat Completions custom tool's call ({"type": "custom", "custom": {"name", "input"}}, docs/formats.md) is a call
    # the models, seal and mask read: the reports named it "custom" and showed "call null" (or "call None: None"),
    # never its tool nor its input, the text a reader checks the summary against. Its input is untrusted text too.
    from compactor_cli.report import render_examples

    patch = "*** Begin Patch\n<script>alert(1)</script>\n*** End Patch"
    messages = [{"role": "user", "content": "Fix it."},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": patch}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "assistant", "content": "Done."}]
    summary = {"role": "assistant", "content": "[Summary of fragment_1; original retained by caller]\npatched"}
    output = [messages[0], summary, messages[3]]
    units = [{"id": "fragment_0", "start": 0, "end": 1, "action": "keep", "reason": "pinned"},
             {"id": "fragment_1", "start": 1, "end": 3, "action": "summarize", "reason": "summarized"},
             {"id": "fragment_3", "start": 3, "end": 4, "action": "keep", "reason": "recent_tail"}]
    report = {"original_bytes": dense(messages), "output_bytes": dense(output), "target_bytes": 10,
              "target_ratio": 0.1, "target_met": False, "reasons": [], "first_changed_index": 1,
              "preserved_prefix_bytes": dense(messages[:1]),
              "fragments": [{k: v for k, v in u.items() if k != "reason"} for u in units]}
    body = {"messages": output, "compacted": True, "compaction": report}
    record = CallRecord(status=200, body=body, mode="decision", bytes_in=report["original_bytes"],
                        bytes_out=report["output_bytes"], report=report)

    page = render_html(messages, record, units, title="t.json", keep_recent=1)
    text = render_examples(messages, body, units, 1)

    unit = page.split('data-id="fragment_1"')[1].split("</li>")[0]
    assert '<span class="who">assistant → apply_patch + 1 result</span>' in unit  # before: "→ custom"
    assert '<pre class="call"><b>apply_patch</b> *** Begin Patch\n&lt;script&gt;alert(1)&lt;/script&gt;' in unit
    assert "<script>alert(1)" not in page
    assert "  call apply_patch: *** Begin Patch" in text  # before: "call None: None"
