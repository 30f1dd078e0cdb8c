"""The page's script runs without an error on every kind of page: a windowed run's page lists no units (its
passes stand for them) and has no filter or expand buttons, and the script, which wires them, threw there
(docs/report.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compactor_cli.main import main
from unit.cli.test_html_report_figures import windowed_transcript


def test_a_windowed_page_runs_its_script_without_an_error(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert main(["compact", str(windowed_transcript(tmp_path)), "-q", "-o", str(tmp_path / "out.json"),
                 "--html", str(page)]) == 0
    assert 'id="expand-all"' not in page.read_text()  # a windowed page: its passes, no units to filter or open
    browser.get_log("browser")  # what earlier pages logged
    browser.get(page.as_uri())
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
