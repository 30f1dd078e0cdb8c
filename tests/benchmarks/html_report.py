"""The HTML report on a ~50 MB transcript: how long it takes to write, how big the page is, and how long
headless Chromium takes to load it and to open every unit.

Run: ``.venv/bin/python tests/benchmarks/html_report.py [--mb 50]``

The transcript is 2 000 tool-call units with ~25 KB outputs; the body marks every third unit summarized
and every seventh archived (the report renders what the body says, so no model runs). Figures:

1. render time of ``render_html`` as a ratio to one ``json.dumps`` of the transcript (same run); goal ≤ 3;
2. page bytes per unit; goal ≤ 4 096 (each long text is cut to a head and a tail, so the page grows with the
   number of units, not with their bytes); its share of the transcript is printed;
3. with Chromium installed: seconds to the load event, and to open every ``<details>`` (printed only).

``--items 10000 100000`` then measures many small items (~280 bytes each, a tool call and its short output) in
mask mode (the real local masking) and in decision mode (a synthetic body as above), where the page lists each
unit on one line in closed pages (docs/report.md "Large transcripts"):

4. page bytes against the transcript's; goal: not more;
5. with Chromium installed: seconds to the load event and for each filter button (the click and the layout it
   causes), for expand all, for two filters while expanded and for collapse all (printed only; goal ~2 s at
   10 000 items on the project's 2-core machine).

Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from compactor.call_record import CallRecord
from compactor.jsonutil import dense_size
from compactor_cli.html_report import render_html

RENDER_GOAL, UNIT_BYTES_GOAL = 3.0, 4096


def transcript(megabytes: float) -> list[dict[str, Any]]:
    units = 2000
    output = "".join(f"{i:06d} some build output with a path src/pkg/module_{i % 97}.py and a number {i * 7}\n"
                     for i in range(int(megabytes * 1_000_000 / units / 77)))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Fix the build."}]
    for i in range(units):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f'{{"cmd": "make {i}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": output})
    return messages


def record_for(messages: list[dict[str, Any]]) -> tuple[CallRecord, list[dict[str, Any]]]:
    output: list[dict[str, Any]] = messages[:2]
    units = [{"id": "fragment_0", "start": 0, "end": 1, "action": "keep", "reason": "pinned"},
             {"id": "fragment_1", "start": 1, "end": 2, "action": "keep", "reason": "pinned"}]
    for start in range(2, len(messages), 2):
        index = start // 2
        if index % 7 == 0:
            action, reason = "archive", "archived"
        elif index % 3 == 0:
            action, reason = "summarize", "summarized"
            output.append({"role": "assistant", "content": f"[Summary of fragment_{start}; original retained by "
                                                           f"caller]\ncall: make {index}\nexit: 0"})
        else:
            action, reason = "keep", "model_kept"
            output.extend(messages[start:start + 2])
        units.append({"id": f"fragment_{start}", "start": start, "end": start + 2, "action": action, "reason": reason})
    original, out = dense_size(messages), dense_size(output)
    compaction = {"original_bytes": original, "output_bytes": out, "target_bytes": original // 10,
                  "target_ratio": 0.1, "target_met": out <= original // 10, "reasons": [],
                  "fragments": [{k: v for k, v in u.items() if k != "reason"} for u in units],
                  "first_changed_index": 2, "preserved_prefix_bytes": dense_size(messages[:2])}
    body = {"messages": output, "compacted": True, "compaction": compaction}
    return CallRecord(status=200, body=body, mode="decision", bytes_in=original, bytes_out=out, report=compaction), units


def small_items(count: int) -> list[dict[str, Any]]:
    """``count`` items: a system prompt, a task, then tool calls each answered by a ~420-byte output."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Fix the build."}]
    i = 0
    while len(messages) < count:
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f'{{"cmd": "make {i}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}",
                         "content": f"{i:06d} build output with a path src/pkg/module_{i % 97}.py ok\n" * 7})
        i += 1
    return messages


def chromium() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path="/usr/bin/chromedriver"))


@contextmanager
def page_file(page: str) -> Iterator[str]:
    """The page written to a file in a temporary folder (removed on exit): its ``file:`` URI."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "report.html"
        path.write_text(page, encoding="utf-8")
        yield path.as_uri()


CLICK = """var done = arguments[arguments.length - 1], t = performance.now();
document.querySelector(arguments[0]).click(); document.body.offsetHeight;
requestAnimationFrame(function () { setTimeout(function () { done((performance.now() - t) / 1000); }); });"""
"""A click, the style and layout it causes, and the next frame drawn: seconds."""


def many_items(counts: list[int]) -> bool:
    """Figures 4 and 5 for each count, in mask and decision mode."""
    from compactor.models import CompactRequest
    from compactor_cli.compact_cmd import compact_locally

    ok, browser = True, shutil.which("/usr/bin/chromium") and shutil.which("/usr/bin/chromedriver")
    for count in counts:
        messages = small_items(count)
        size = dense_size(messages)
        mask, mask_units = compact_locally(CompactRequest.model_validate(
            {"messages": messages, "mode": "mask", "target_ratio": 0.5}))
        for mode, (record, units) in (("mask", (mask, mask_units)), ("decision", record_for(messages))):
            started = time.perf_counter()
            page = render_html(messages, record, units, title="synthetic.json", keep_recent=6)
            render_s = time.perf_counter() - started
            page_bytes = len(page.encode("utf-8"))
            ok = ok and page_bytes <= size
            print(f"{count} items, {mode}: transcript {size / 1e6:.2f} MB, page {page_bytes / 1e6:.2f} MB "
                  f"({100 * page_bytes / size:.0f}%, goal <= 100%), {page_bytes / len(messages):.0f} B per item; "
                  f"render {render_s:.2f} s")
            if not browser:
                continue
            driver = chromium()
            driver.set_script_timeout(600)
            try:
                with page_file(page) as uri:
                    started = time.perf_counter()
                    driver.get(uri)
                    driver.execute_script("return document.body.offsetHeight")
                    print(f"  chromium: load {time.perf_counter() - started:.2f} s", end="", flush=True)
                    for action in ("keep", "summarize", "archive", "all"):
                        seconds = driver.execute_async_script(CLICK, f'[data-filter="{action}"]')
                        print(f", {action} {seconds:.2f} s", end="", flush=True)
                    for name, button in (("expand all", "#expand-all"), ("keep, expanded", '[data-filter="keep"]'),
                                         ("all, expanded", '[data-filter="all"]'), ("collapse all", "#collapse-all")):
                        print(f", {name} {driver.execute_async_script(CLICK, button):.2f} s", end="", flush=True)
                    print()
            finally:
                driver.quit()
    return ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--items", type=int, nargs="*", default=[], help="also measure these many small items")
    args = parser.parse_args()
    messages = transcript(args.mb)
    record, units = record_for(messages)
    started = time.perf_counter()
    dumped = json.dumps(messages)
    dump_s = time.perf_counter() - started
    started = time.perf_counter()
    page = render_html(messages, record, units, title="synthetic.json", keep_recent=6)
    render_s = time.perf_counter() - started
    size = len(page.encode("utf-8"))
    print(f"transcript: {len(dumped.encode()) / 1e6:.1f} MB, {len(messages)} messages, {len(units)} units")
    print(f"render: {render_s:.2f} s = {render_s / dump_s:.2f} x one json.dumps ({dump_s:.2f} s); goal <= {RENDER_GOAL}")
    print(f"page: {size / 1e6:.2f} MB = {size / len(units):.0f} bytes per unit (goal <= {UNIT_BYTES_GOAL}), "
          f"{100 * size / len(dumped.encode()):.1f}% of the transcript")
    ok = render_s / dump_s <= RENDER_GOAL and size / len(units) <= UNIT_BYTES_GOAL
    if shutil.which("/usr/bin/chromium") and shutil.which("/usr/bin/chromedriver"):
        driver = chromium()
        try:
            with page_file(page) as uri:
                started = time.perf_counter()
                driver.get(uri)
                load_s = time.perf_counter() - started
                started = time.perf_counter()
                driver.find_element("id", "expand-all").click()
                driver.execute_script("return document.body.offsetHeight")  # force the layout
                expand_s = time.perf_counter() - started
            print(f"chromium: loaded in {load_s:.2f} s; every unit opened and laid out in {expand_s:.2f} s")
        finally:
            driver.quit()
    else:
        print("chromium: not installed, load time not measured")
    if args.items:
        ok = many_items(args.items) and ok
    print("OK" if ok else "GOAL MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
