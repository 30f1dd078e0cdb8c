"""A page of another site, open in headless Chromium, tries to make a keyless ``compactor serve`` compact: the
browser's own requests (no CORS preflight for a body without a type) reach no function instance."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from browser.conftest import REBOUND_NAME
from compactor.http_api import proxy_response
from compactor_cli import serve
from fakes.local_serve import running

HOSTILE_PAGE = b"<!doctype html><title>another site</title><p>nothing to see"
SEND = """
const done = arguments[arguments.length - 1];
const body = JSON.stringify({messages: [{role: "user", content: "spend"}]});
const sent = [
  fetch(arguments[0] + "/compact", {method: "POST", mode: "no-cors", body: new Blob([body])}),  // no Content-Type
  fetch(arguments[0] + "/flows", {method: "POST", mode: "no-cors", body: new Blob([body])}),
  fetch(arguments[0] + "/compact", {method: "POST", mode: "no-cors", body: body,
                                    headers: {"Content-Type": "text/plain"}}),
];
Promise.allSettled(sent).then(results => done(results.map(result => result.status)));
"""


@pytest.fixture
def hostile_site() -> Iterator[str]:
    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(HOSTILE_PAGE)))
            self.end_headers()
            self.wfile.write(HOSTILE_PAGE)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"  # another site than 127.0.0.1
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_another_sites_page_cannot_make_a_keyless_server_compact(browser: Any, hostile_site: str) -> None:
    # Until this was fixed the two typeless posts reached the function, which compacted them as JSON with the
    # server's catalog (paid offers too); the text/plain one was the function's 415.
    reached: list[dict[str, Any]] = []

    def function(event: dict[str, Any], context: Any) -> dict[str, Any]:
        reached.append(event)
        return proxy_response(200, {"ok": True})

    with running(serve.CompactorServer(("127.0.0.1", 0), function, api_key=None)) as api:
        browser.get(hostile_site)
        browser.set_script_timeout(60)
        statuses = browser.execute_async_script(SEND, api)

    assert statuses == ["fulfilled"] * 3  # the requests were sent (opaque answers), not blocked by the browser
    assert reached == []


READ = """
const done = arguments[arguments.length - 1];
fetch("/v1/usage").then(answer => answer.text().then(text => done([answer.status, text])),
                        error => done(["failed", String(error)]));
"""


def test_a_rebound_name_cannot_read_a_keyless_servers_answers(browser: Any) -> None:
    # rebound.test resolves to 127.0.0.1 (DNS rebinding): the server is that site's origin for the browser, so the
    # site's page read its answers (here the usage ledger; a compaction's answer as well) until this was fixed.
    def function(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return proxy_response(200, {"secret": "usage"})

    with running(serve.CompactorServer(("127.0.0.1", 0), function, api_key=None)) as api:
        port = api.removesuffix("/v1").rsplit(":", 1)[1]
        browser.get(f"http://{REBOUND_NAME}:{port}/")  # the report page, served under the rebound name
        browser.set_script_timeout(60)
        status, text = browser.execute_async_script(READ)

    assert status == 403 and "cross_site_request" in text and "secret" not in text
