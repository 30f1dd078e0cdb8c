"""``compactor serve``'s pages in headless Chromium: the report page compacts a pasted transcript behind the
API key, and Swagger UI renders the API document with nothing fetched from the network."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import Select, WebDriverWait

from fakes.local_serve import api_server

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
API_KEY = "page-test-key"
WAIT_S = 60  # a generous bound for a page to finish, not a speed assertion


@pytest.fixture(scope="module")
def root() -> Iterator[str]:
    with api_server(API_KEY) as base:
        yield base.removesuffix("/v1")


def submit(browser: Any, transcript: str, key: str | None, mode: str = "decision") -> str:
    """Fill the form (the transcript set directly: typing 160 KB is slow), submit, return the status text."""
    browser.execute_script("document.getElementById('transcript').value = arguments[0]", transcript)
    Select(browser.find_element(By.ID, "mode")).select_by_value(mode)
    field = browser.find_element(By.ID, "key")
    field.clear()
    if key:
        field.send_keys(key)
    browser.find_element(By.ID, "run").click()
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, WAIT_S).until(lambda _: status.text not in ("", "Compacting…"))
    return status.text


def test_the_report_page_compacts_a_pasted_transcript_behind_the_key(browser: Any, screenshot: Any,
                                                                      root: str) -> None:
    browser.set_window_size(1280, 1600)
    browser.get(f"{root}/")
    assert browser.find_element(By.TAG_NAME, "h1").text == "See a compaction"
    for control in ("transcript", "file", "mode", "target", "keep", "key"):  # every control has a label
        assert browser.find_element(By.CSS_SELECTOR, f"label[for={control}]").text

    assert "HTTP 403" in submit(browser, DEMO.read_text(), key=None)
    assert "HTTP 400" in submit(browser, "not a transcript", key=API_KEY)
    assert submit(browser, DEMO.read_text(), key=API_KEY) == "Report ready below."

    frame = browser.find_element(By.ID, "report")
    WebDriverWait(browser, WAIT_S).until(lambda _: frame.size["height"] > 1000)  # grown to its content
    expected = httpx.post(f"{root}/v1/compact", headers={"x-api-key": API_KEY}, timeout=60, json={
        "messages": json.loads(DEMO.read_text())["messages"] if isinstance(json.loads(DEMO.read_text()), dict)
        else json.loads(DEMO.read_text()), "decision_policy_ir": _decision_policy()}).json()
    screenshot("page")
    browser.switch_to.frame(frame)
    try:
        units = browser.find_elements(By.CSS_SELECTOR, "li.unit")
        assert [u.get_attribute("data-action") for u in units] == [
            f["action"] for f in expected["compaction"]["fragments"]]
    finally:
        browser.switch_to.default_content()

    assert submit(browser, DEMO.read_text(), key=API_KEY, mode="seal") == "Report ready below."
    browser.switch_to.frame(browser.find_element(By.ID, "report"))
    try:
        WebDriverWait(browser, WAIT_S).until(ready.presence_of_element_located((By.CSS_SELECTOR, "li.unit")))
        assert "seal mode" in browser.find_element(By.CSS_SELECTOR, "p.sub").text
    finally:
        browser.switch_to.default_content()


def test_swagger_ui_renders_every_route_offline(browser: Any, screenshot: Any, root: str) -> None:
    browser.get(f"{root}/docs")
    WebDriverWait(browser, WAIT_S).until(ready.presence_of_element_located((By.CSS_SELECTOR, ".opblock")))
    paths = {e.text.replace("\u200b", "") for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/compact", "/flows", "/flows/normalize", "/healthz"} <= paths
    assert not browser.find_elements(By.CSS_SELECTOR, "script[src], link[href]")  # assets are inline
    screenshot("swagger")


def _decision_policy() -> Any:
    from compactor.compaction.preset import load_preset

    return load_preset()["flow"][1]["classify"]["policy"]
