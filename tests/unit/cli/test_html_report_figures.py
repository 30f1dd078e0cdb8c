"""The HTML report's figures (cli/compactor_cli/html_report.py) are the run's: the model calls, their fallbacks and
the cost say what the text report and ``--strict`` say, in one request and in windows (docs/report.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compactor_cli.main import main

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
TRANSCRIPT = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"

pytestmark = pytest.mark.usefixtures("bundled_catalog")


def failing_catalog(tmp_path: Path) -> str:
    """Offers on a port nothing listens on: every model call fails over to its fallback."""
    common = {"provider": "acme", "family": "m", "model": "m", "base_url": "http://127.0.0.1:9/v1", "price_in": 0.1,
              "price_out": 0.2, "supports_json_mode": True}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"offers": [
        {**common, "id": "acme/decider", "protocol": "decisions", "transport": "chat-decisions"},
        {**common, "id": "acme/summarizer", "protocol": "chat", "transport": "openai"}]}))
    return str(path)


def facts(html: str) -> dict[str, str]:
    return {key: re.sub(r"<[^>]+>", "", re.search(rf'<dd id="{key}">(.*?)</dd>', html).group(1))
            for key in ("cost", "calls")}


def test_one_request_counts_fallbacks_as_the_text_report_does(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # The decider's calls fell back, so the summarizer nodes were skipped (no call made): the page said
    # "4 calls, 4 with a fallback, failure or skip" where the text report and --strict said 2 fell back.
    page = tmp_path / "report.html"
    assert main(["compact", str(TRANSCRIPT), "--catalog", failing_catalog(tmp_path), "-o", str(tmp_path / "o.json"),
                 "--html", str(page)]) == 0
    report = capsys.readouterr().err
    fell_back = int(re.search(r"problems: (\d+) model calls? fell back", report).group(1))
    html = page.read_text()
    calls = facts(html)["calls"]
    nodes = html.count("<tr class=")
    skipped = html.count("<td>skipped</td></tr>")
    assert 0 < fell_back and skipped and fell_back + skipped == nodes
    assert calls == f"{nodes} calls, {fell_back} with a fallback or failure, {skipped} skipped (not needed, nothing sent)"


def windowed_transcript(tmp_path: Path) -> Path:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tidy the logs."}]
    for i in range(200):  # more candidates than one request takes: compacted in windows
        messages.append({"role": "assistant", "content": f"step {i}: " + "log line with details\n" * 40})
    source = tmp_path / "t.json"
    source.write_text(json.dumps(messages))
    return source


@pytest.mark.parametrize("failing", [False, True])
def test_a_windowed_page_counts_the_windows_model_calls_and_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                failing: bool) -> None:
    # The page read the calls from the record's nodes, which a windowed run does not have: it said "none: no model
    # was called" and "0 calls, 0 with a fallback" while the text report counted every window's calls and cost.
    page = tmp_path / "report.html"
    catalog = ["--catalog", failing_catalog(tmp_path)] if failing else []
    assert main(["compact", str(windowed_transcript(tmp_path)), *catalog, "--json", "-o", str(tmp_path / "body.json"),
                 "--html", str(page)]) == 0
    report = capsys.readouterr().err
    html = page.read_text()
    assert '<tr class="pass">' in html
    calls, cost, basis = re.search(r"model calls: (\d+); cost: (\S+) \((.*)\)", report).groups()
    shown = facts(html)
    assert shown["cost"] == f"{cost} ({basis})"
    assert shown["calls"].startswith(f"{calls} calls in the windows, ")
    problems = re.search(r"problems: (\d+) model calls? fell back \((.*?)\)", report)
    if failing:
        kinds = problems.group(2).replace(" x", " ×")
        assert shown["calls"].endswith(f", {problems.group(1)} with a fallback or failure ({kinds}; their windows "
                                       "kept those units)")
    else:
        assert int(calls) > 0 and problems is None and shown["calls"].endswith(", 0 with a fallback or failure")
    assert re.search(r'class="sub">decision mode · 1 pass over windows: \d+ windows', html) or \
        re.search(r'class="sub">decision mode · \d+ passes over windows', html)


def test_a_windowed_page_that_misses_its_target_claims_no_bytes_it_does_not_know(tmp_path: Path) -> None:
    # It said "The pinned messages and the protected tail alone are 0 bytes (0.0% of the target); the output bytes
    # by reason below show the rest": a windowed page has no units, so it summed none, and has no such section.
    page = tmp_path / "report.html"
    assert main(["compact", str(windowed_transcript(tmp_path)), "--target-ratio", "0.01", "-q", "-o",
                 str(tmp_path / "out.json"), "--html", str(page)]) == 0
    html = page.read_text()
    target = re.search(r'<dd id="target">(.*?)</dd>', html).group(1)
    assert "<strong>not met</strong>" in target and "alone are" not in target and "below show the rest" not in target
    assert "the passes below" in target and 'id="by-reason"' not in html and "<dt>Unit ids</dt>" not in html
