"""``compactor eval --html`` in headless Chromium: one plot per transcript with a point per method, placed
where the JSON's numbers say, and the means table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from compactor_cli.main import main

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "corpus"
FILES = [CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json",
         CORPUS / "ccb_claude-opus-4-5_dependeval-java-accountauthenticator.jsonl"]


def test_the_eval_page_plots_every_method_per_transcript(browser: Any, screenshot: Any, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "eval.html"
    assert main(["eval", *map(str, FILES), "--json", "--html", str(page)]) == 0
    document = json.loads(capsys.readouterr().out)
    browser.get(page.as_uri())

    figures = browser.find_elements(By.CSS_SELECTOR, "figure.transcript")
    assert [f.get_attribute("data-transcript") for f in figures] == [p.stem for p in FILES]
    for figure in figures:
        rows = [r for r in document["rows"] if r["transcript"] == figure.get_attribute("data-transcript")]
        marks = figure.find_elements(By.CSS_SELECTOR, "svg circle, svg rect:not(.frame), svg polygon")
        assert len(marks) == len(rows)
        labels = [m.find_element(By.TAG_NAME, "title").get_attribute("textContent") for m in marks]
        assert labels == [f"{r['method']}: bytes {100 * r['ratio']:.1f}%, evidence {100 * r['evidence_kept']:.1f}%"
                          for r in rows]
        frame = figure.find_element(By.CSS_SELECTOR, "rect.frame").rect
        for mark, row in zip(marks, rows):  # the point sits where its numbers put it
            centre_x = mark.rect["x"] + mark.rect["width"] / 2
            centre_y = mark.rect["y"] + mark.rect["height"] / 2
            assert abs((centre_x - frame["x"]) / frame["width"] - row["ratio"]) < 0.03
            assert abs(1 - (centre_y - frame["y"]) / frame["height"] - row["evidence_kept"]) < 0.03
    means = browser.find_elements(By.CSS_SELECTOR, "#means tbody tr")
    assert [r.find_element(By.TAG_NAME, "th").text for r in means] == list(document["means"])
    screenshot("eval")
