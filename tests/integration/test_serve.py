"""``compactor serve`` in-process on a free port, spoken to over real HTTP."""

from __future__ import annotations

import base64
import http.client
import json
import re
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from compactor import __version__
from compactor.budget import flow_budget_ms
from compactor_cli import serve
from compactor_cli.main import build_parser
from compactor_cli.sam_template import Template
from compactor.http_api import MAX_BODY_BYTES, proxy_response, rest_proxy_event
from fakes.local_serve import running

REPO = Path(__file__).resolve().parents[2]
API_KEY = "local-test-key"
TRANSCRIPT = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."}]


@pytest.fixture
def open_server() -> Iterator[str]:
    with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact")) as url:
        yield url


@pytest.fixture
def keyed_server() -> Iterator[str]:
    with running(serve.create_server(port=0, api_key=API_KEY, code_dir=REPO / "functions" / "compact")) as url:
        yield url


def test_healthz(open_server: str) -> None:
    response = httpx.get(f"{open_server}/healthz")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"ok": True, "version": __version__}


def test_compact_with_nothing_to_seal_returns_the_messages(open_server: str) -> None:
    response = httpx.post(f"{open_server}/compact", json={"messages": TRANSCRIPT})

    assert response.status_code == 200
    assert response.json() == {"messages": TRANSCRIPT, "compacted": False}


def test_kept_alive_connections_are_answered_without_nagles_wait() -> None:
    """Every accepted connection sets TCP_NODELAY. The handler writes a response's headers and its body in two
    sends; without the option, Nagle's algorithm held the body of every response after a kept connection's first
    until the client acknowledged the headers, which Linux delays up to 40 ms (a client with a connection pool
    waited about 44 ms a request). The option is what decides that wait, so it is what is asserted: no timing."""
    server = serve.create_server(port=0, code_dir=REPO / "functions" / "compact")
    nodelay: list[int] = []
    finish_request = server.finish_request

    def recording(request: Any, client_address: Any) -> None:
        finish_request(request, client_address)  # the connection's requests, until the client closes it
        nodelay.append(request.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    server.finish_request = recording  # type: ignore[method-assign]
    with running(server) as url, httpx.Client() as client:
        assert [client.get(f"{url}/healthz").status_code for _ in range(3)] == [200, 200, 200]
        client.close()  # the server's handler sees the end of the connection and returns
        deadline = time.monotonic() + 10
        while not nodelay and time.monotonic() < deadline:
            time.sleep(0.01)

    assert nodelay and nodelay[0] != 0, nodelay  # one connection for the three requests, sent without delay


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "wrong"}])
def test_missing_or_wrong_key_is_403_like_api_gateway(keyed_server: str, headers: dict[str, str]) -> None:
    response = httpx.post(f"{keyed_server}/compact", json={"messages": TRANSCRIPT}, headers=headers)

    assert response.status_code == 403
    assert response.json() == {"message": "Forbidden"}


def test_right_key_is_served(keyed_server: str) -> None:
    assert httpx.get(f"{keyed_server}/healthz", headers={"x-api-key": API_KEY}).status_code == 200


def test_body_over_the_limit_is_413_before_it_is_read(open_server: str) -> None:
    url = httpx.URL(open_server)
    connection = http.client.HTTPConnection(url.host, url.port)
    connection.putrequest("POST", "/v1/compact")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    connection.endheaders()  # no body is sent: the server must answer from the headers alone

    response = connection.getresponse()

    assert response.status == 413
    assert json.loads(response.read())["error"]["code"] == "request_too_large"
    connection.close()


@pytest.mark.parametrize(("declared", "status"), [
    ("1_5", 400), ("+15", 400), ("-15", 400), ("0x0f", 400), ("9" * 19, 400), ("15", 200), (" 15 ", 200),
])
def test_a_content_length_is_digits(open_server: str, declared: str, status: int) -> None:
    # int() read "1_5" and "+15" as 15: the body was read by Python's number syntax, not HTTP's.
    url = httpx.URL(open_server)
    body = b'{"messages":[]}'
    with socket.create_connection((url.host, url.port), timeout=30) as client:
        client.sendall(b"POST /v1/compact HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + declared.encode("utf-8") + b"\r\nConnection: close\r\n\r\n" + body)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk

    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == str(status).encode()
    if status == 400:
        assert json.loads(payload)["error"]["message"] == "invalid Content-Length"


@pytest.mark.parametrize("body", [b'{"messages": []}', b'{"messages": [{"role": "user", "content": "hi"'])
def test_a_body_shorter_than_its_content_length_is_400(open_server: str, body: bytes) -> None:
    # The client ended its side early: the bytes that came were compacted as the request, 200 for a whole JSON value
    # (its Content-Length counting more than was sent) and the 422 json_invalid of a body it never sent otherwise.
    head = (b"POST /v1/compact HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (len(body) + 20))

    status, payload = _exchange(open_server, head + body)

    assert status == 400
    expected = f"the body ended after {len(body)} of its Content-Length {len(body) + 20} bytes"
    assert json.loads(payload)["error"]["message"] == expected


@pytest.mark.parametrize(("request_head", "status"), [
    (b"GET /v1/" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET /v1/healthz HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    (b"GET /v1/healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n", 431),
    # A request line http.server cannot read is answered as HTTP/0.9 is: the body alone, no status line.
    (b"GET /v1/healthz HTTP/9.9\r\n\r\n", None),
    (b'GET /v1/healthz HTTP/1."x\\\r\n\r\n', None),
    (b"GET\r\n\r\n", None),
])
def test_what_http_server_refuses_itself_is_answered_as_json(open_server: str, request_head: bytes,
                                                             status: int | None) -> None:
    # http.server answered these with an HTML page, which a client reading the API's errors as JSON cannot read.
    url = httpx.URL(open_server)
    with socket.create_connection((url.host, url.port), timeout=30) as client:
        client.sendall(request_head)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk

    if status is None:
        payload = answer
    else:
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == str(status).encode()
        assert b"\r\ncontent-type: application/json\r\n" in head.lower() + b"\r\n"
    error = json.loads(payload)["error"]
    assert error["message"].strip() and error["type"] in ("invalid_request_error", "server_error")


def _exchange(base: str, request: bytes) -> tuple[int, bytes]:
    url = httpx.URL(base)
    with socket.create_connection((url.host, url.port), timeout=30) as client:
        client.sendall(request)
        client.shutdown(socket.SHUT_WR)  # all is sent: a body cut short ends here
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), payload


def _chunked(body: bytes, size: int) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
                    for i in range(0, len(body), size)) + b"0\r\nX-Trailer: t\r\n\r\n"


CHUNKED_HEAD = (b"POST /v1/compact HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")


def test_a_chunked_body_is_read_as_api_gateway_reads_it(open_server: str) -> None:
    # A client streaming its body (Go's http.Client with an io.Reader, fetch with a stream, curl -T -) sends it
    # chunked; API Gateway takes that, and compactor serve answered every such request 411.
    body = json.dumps({"messages": TRANSCRIPT * 20, "mode": "mask", "keep_recent": 1}).encode("utf-8")
    expected = httpx.post(f"{open_server}/compact", content=body, headers={"Content-Type": "application/json"})

    status, payload = _exchange(open_server, CHUNKED_HEAD + _chunked(body, 100))

    assert status == expected.status_code == 200
    assert payload == expected.content


def test_a_chunked_connection_stays_usable(open_server: str) -> None:
    def stream() -> Iterator[bytes]:
        yield b'{"messages": []'
        yield b', "mode": "mask"}'

    with httpx.Client() as client:  # a generator body goes out chunked, on one kept-alive connection
        first = client.post(f"{open_server}/compact", content=stream(), headers={"Content-Type": "application/json"})
        second = client.post(f"{open_server}/compact", content=stream(), headers={"Content-Type": "application/json"})

    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert first.json()["messages"] == [] and first.json()["compacted"] is False


@pytest.mark.parametrize("chunks", [b"zz\r\n{}\r\n0\r\n\r\n", b"-2\r\n{}\r\n0\r\n\r\n", b"2\r\n{}XX0\r\n\r\n", b"",
                                    b"5\r\n{}\r\n"])
def test_a_malformed_chunked_body_is_400(open_server: str, chunks: bytes) -> None:
    status, payload = _exchange(open_server, CHUNKED_HEAD + chunks)

    assert status == 400
    assert json.loads(payload)["error"]["message"] == "invalid chunked body"


def test_a_chunked_body_over_the_limit_is_413(open_server: str) -> None:
    piece = b"x" * (1 << 20)
    status, payload = _exchange(open_server, CHUNKED_HEAD + _chunked(piece * 11, len(piece)))

    assert status == 413 and json.loads(payload)["error"]["code"] == "request_too_large"


def test_another_transfer_coding_is_411(open_server: str) -> None:
    status, payload = _exchange(open_server, CHUNKED_HEAD.replace(b"chunked", b"gzip, chunked") + b"0\r\n\r\n")

    assert status == 411


def test_a_transfer_coding_on_a_second_line_is_read_too(open_server: str) -> None:
    """``chunked`` then ``gzip`` on two lines is the list "chunked, gzip" (RFC 9110 5.3): the first line alone was
    read, and the body was taken as chunked JSON."""
    head = CHUNKED_HEAD.replace(b"Transfer-Encoding: chunked\r\n",
                                b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n")

    status, _ = _exchange(open_server, head + _chunked(b'{"messages": []}', 100))

    assert status == 411


@pytest.mark.parametrize("lengths", [(5, 16), (16, 5)])
def test_two_different_content_lengths_are_400(open_server: str, lengths: tuple[int, int]) -> None:
    """The first was read: with 5 first, the 422 of a body never sent, and the rest of the body read as the next
    request on the connection; with 16 first, a 200 for a request whose length was in doubt."""
    body = b'{"messages": []}'
    head = (b"POST /v1/compact HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % lengths)

    status, payload = _exchange(open_server, head + body)

    assert status == 400
    assert json.loads(payload)["error"]["message"] == (
        "Content-Length was sent with 2 different values: send it once")


def test_one_content_length_twice_is_that_length(open_server: str) -> None:
    body = b'{"messages": []}'
    head = (b"POST /v1/compact HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: 16\r\nContent-Length: 16\r\n\r\n")

    assert _exchange(open_server, head + body)[0] == 200


@pytest.mark.parametrize(
    ("content", "error_type"),
    [(b"not json", "json_invalid"), (b'{"keep_recent": 1}', "missing"), (b'{"messages": [], "target_ratio": 2}',
                                                                         "less_than_equal")],
)
def test_invalid_bodies_are_422(open_server: str, content: bytes, error_type: str) -> None:
    response = httpx.post(f"{open_server}/compact", content=content, headers={"Content-Type": "application/json"})

    assert response.status_code == 422
    assert error_type in [item["type"] for item in response.json()["detail"]]


def test_a_422_says_the_validators_words(open_server: str) -> None:
    # Its msg began with pydantic's "Value error, " before the words docs/behaviour.md quotes.
    from compactor.compaction.modes import names

    response = httpx.post(f"{open_server}/compact", json={"messages": TRANSCRIPT, "mode": "nope"})

    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == f"mode must be one of: {', '.join(names())}"


@pytest.mark.parametrize("content", [b'{"messages": [{"role": "user", "content": "A\xff"}]}', b"\xff\xfe{}"])
def test_a_body_that_is_not_utf8_is_a_400_naming_the_byte(open_server: str, content: bytes) -> None:
    # Its invalid bytes were replaced by U+FFFD: the first body, valid JSON then, was compacted as "A\ufffd" (200).
    response = httpx.post(f"{open_server}/compact", content=content, headers={"Content-Type": "application/json"})

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    offset = content.index(b"\xff")
    assert response.json() == {"error": {"message": f"the body is not UTF-8 text (an invalid byte at offset {offset})",
                                         "type": "invalid_request_error", "code": None}}


def test_events_carry_utf8_bodies_as_text_and_others_as_they_came() -> None:
    def event(body: bytes) -> dict[str, Any]:
        return rest_proxy_event(method="POST", resource_path="/compact", query={}, headers=[], body=body)

    assert (event(b'{"a": "\xc3\xa9"}')["body"], event(b'{"a": "\xc3\xa9"}')["isBase64Encoded"]) == (
        '{"a": "\u00e9"}', False)
    invalid = event(b'\xff\xfe{"a": "\xc3\xa9"}')
    assert (invalid["body"], invalid["isBase64Encoded"]) == (base64.b64encode(b'\xff\xfe{"a": "\xc3\xa9"}').decode(),
                                                             True)


@pytest.mark.parametrize("path", ["/v1/nowhere", "/v1", "/compact", "/nowhere", "/report"])
def test_unknown_paths_are_404_json(open_server: str, path: str) -> None:
    base = open_server.removesuffix("/v1")
    response = httpx.get(f"{base}{path}")

    assert response.status_code == 404
    # The path as sent: the function's 404 said "no route for GET /nowhere" for /v1/nowhere, and "/v1/" for /v1.
    assert response.json()["error"] == {"message": f"no route for GET {path}", "type": "invalid_request_error",
                                        "code": "not_found"}


def test_head_options_and_unknown_methods_are_answered_as_the_function_answers_them(open_server: str) -> None:
    # http.server answered them 501 with an HTML page; then the function answered every one 404 "no route for".
    # Now: HEAD is the GET without its body, OPTIONS 204 with Allow, a method the path has no route for 405 with Allow.
    host, port = open_server.removeprefix("http://").removesuffix("/v1").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        answers = []
        for method in ("HEAD", "FOO", "OPTIONS", "GET"):  # one kept-alive connection: HEAD and 204 carry no body
            connection.request(method, "/v1/healthz")
            response = connection.getresponse()
            answers.append((response.status, dict(response.getheaders()), response.read()))
    finally:
        connection.close()

    (head, head_headers, head_body), (foo, foo_headers, foo_body), (options, options_headers, options_body), \
        (get, get_headers, get_body) = answers
    assert (get, head) == (200, 200) and head_body == b"" and get_body
    assert head_headers["Content-Type"] == "application/json"
    assert head_headers["Content-Length"] == get_headers["Content-Length"] == str(len(get_body))
    assert (foo, foo_headers["Content-Type"], foo_headers["Allow"]) == (405, "application/json", "GET, HEAD, OPTIONS")
    assert json.loads(foo_body)["error"] == {"message": "FOO is not allowed on /v1/healthz; allowed: GET, HEAD, OPTIONS",
                                             "type": "invalid_request_error", "code": "method_not_allowed"}
    assert (options, options_headers["Allow"], options_body) == (204, "GET, HEAD, OPTIONS", b"")
    assert "Content-Length" not in options_headers


def echo_server(handler: Callable[[dict[str, Any], Any], dict[str, Any]]) -> serve.CompactorServer:
    return serve.CompactorServer(("127.0.0.1", 0), handler, api_key=None)


def test_requests_become_the_events_stage_v1_delivers() -> None:
    seen: list[tuple[dict[str, Any], Any]] = []

    def capture(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append((event, context))
        return proxy_response(200, {"captured": True})

    with running(echo_server(capture)) as url:
        response = httpx.post(f"{url}/flows/normalize?a=1&a=2", content=b'{"flow_ir": []}',
                              headers={"Content-Type": "application/json", "X-Custom": "yes"})

    assert response.json() == {"captured": True}
    (event, context), = seen
    assert (event["httpMethod"], event["path"], event["resource"]) == ("POST", "/flows/normalize", "/flows/normalize")
    assert event["requestContext"]["path"] == "/v1/flows/normalize"
    assert event["requestContext"]["stage"] == "v1"
    assert event["multiValueQueryStringParameters"] == {"a": ["1", "2"]}
    assert event["queryStringParameters"] == {"a": "2"}
    assert event["headers"]["X-Custom"] == "yes"
    assert (event["body"], event["isBase64Encoded"]) == ('{"flow_ir": []}', False)
    assert 0 < context.get_remaining_time_in_millis() <= serve.FUNCTION_TIMEOUT_S * 1000


def test_a_crashing_handler_is_502_like_api_gateway() -> None:
    def crash(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise RuntimeError("handler bug")

    with running(echo_server(crash)) as url:
        response = httpx.get(f"{url}/healthz")

    assert response.status_code == 502
    assert response.json() == {"message": "Internal server error"}


def test_a_failure_of_the_server_itself_is_a_500_json_answer() -> None:
    # Anything the request handler raised closed the connection without an answer.
    def malformed(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": "two hundred", "body": "{}"}

    with running(echo_server(malformed)) as url:
        response = httpx.get(f"{url}/healthz")

    assert response.status_code == 500
    assert response.json() == {"error": {"message": "internal server error", "type": "server_error", "code": None}}


REPORT_TRANSCRIPT = json.dumps([{"role": "user", "content": "Fix the bug."}, {"role": "tool", "content": "x" * 500},
                                {"role": "assistant", "content": "Done."}])


@pytest.mark.parametrize(("payload", "status", "message"), [
    (b"[" * 100_000 + b"]" * 100_000, 400, "JSON nested deeper than 128 levels"),
    (json.dumps({"transcript": REPORT_TRANSCRIPT, "name": "\ud83d"}).encode(), 422,
     "text must be valid Unicode: it contains a lone surrogate (\\ud83d)"),
    (json.dumps({"transcript": REPORT_TRANSCRIPT[:-2] + ', "\ud800"]'}).encode(), 422,
     "text must be valid Unicode: it contains a lone surrogate (\\ud800)"),
])
def test_the_report_page_refuses_what_the_api_refuses(open_server: str, payload: bytes, status: int,
                                                      message: str) -> None:
    # A deep body (RecursionError in json.loads) or a lone surrogate in "name" closed the connection.
    response = httpx.post(open_server.removesuffix("/v1") + "/report", content=payload,
                          headers={"Content-Type": "application/json"})

    assert response.status_code == status
    assert response.json()["error"]["message"].startswith(message)


def test_the_report_page_says_what_is_wrong_with_its_settings_in_one_line(open_server: str) -> None:
    # Before: pydantic's dump, the input echoed and a link to its documentation.
    response = httpx.post(open_server.removesuffix("/v1") + "/report", headers={"Content-Type": "application/json"},
                          json={"transcript": REPORT_TRANSCRIPT, "mode": "decision", "target_ratio": 5})

    assert response.status_code == 422
    assert response.json()["error"]["message"] == "invalid request: target_ratio: Input should be less than or equal to 1"


def test_the_report_page_offers_every_mode(open_server: str) -> None:
    from compactor.compaction.modes import names

    page = httpx.get(open_server.removesuffix("/v1") + "/").text
    offered = re.findall(r'<option value="([a-z]+)"', page[page.index('id="mode"'):page.index("</select>")])

    assert sorted(offered) == sorted(names())  # mask was missing
    mask = httpx.post(open_server.removesuffix("/v1") + "/report", headers={"Content-Type": "application/json"},
                      json={"transcript": REPORT_TRANSCRIPT, "mode": "mask"})
    assert mask.status_code == 200 and "mask mode" in mask.text


def test_the_template_environment_is_compact_functions_resolved_one() -> None:
    environment = serve.template_environment(REPO / "template.yaml")

    assert environment["COMPACTOR_FLOW_BUDGET_MS"] == "25000"  # FlowBudgetMs' default, not the 40 s fallback
    assert environment["POWERTOOLS_SERVICE_NAME"] == "compactor"
    assert environment["COMPACTOR_BATCH_FANOUT"] == "inline"
    assert "COMPACTOR_STATE_MACHINE_ARN" not in environment  # AWS::NoValue without the fan-out
    overridden = serve.template_environment(REPO / "template.yaml", {"FlowBudgetMs": "40000"})
    assert overridden["COMPACTOR_FLOW_BUDGET_MS"] == "40000"


def test_no_variable_of_the_local_environment_names_a_resource_of_the_stack() -> None:
    # COMPACTOR_JOBS_BUCKET was applied as "TranscriptBucket": POST /v1/uploads and GET /v1/jobs/{id} were a 500
    # NoCredentialsError on compactor serve instead of the documented 503.
    resources = set(Template.load(REPO / "template.yaml").resources)

    environment = serve.template_environment(REPO / "template.yaml")

    assert {name: value for name, value in environment.items() if value in resources} == {}


def test_uploads_are_503_on_the_local_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPACTOR_JOBS_BUCKET", raising=False)
    server = serve.create_server(port=0, code_dir=REPO / "functions" / "compact",
                                 environment=serve.template_environment(REPO / "template.yaml"))
    with running(server) as url:
        answers = [httpx.post(f"{url}/uploads"), httpx.get(f"{url}/jobs/{'0' * 32}")]

    assert [(answer.status_code, answer.json()["error"]["code"]) for answer in answers] == [
        (503, "uploads_unavailable"), (503, "uploads_unavailable")]


def test_the_shell_environment_wins_over_the_template() -> None:
    environ = {"COMPACTOR_FLOW_BUDGET_MS": "5000"}

    applied = serve.apply_environment({"COMPACTOR_FLOW_BUDGET_MS": "25000", "POWERTOOLS_SERVICE_NAME": "compactor"},
                                      environ)

    assert applied == {"POWERTOOLS_SERVICE_NAME": "compactor"}
    assert environ == {"COMPACTOR_FLOW_BUDGET_MS": "5000", "POWERTOOLS_SERVICE_NAME": "compactor"}


def test_serve_applies_the_template_environment_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in serve.template_environment(REPO / "template.yaml"):
        monkeypatch.delenv(name, raising=False)  # restored after the test
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "DEBUG")  # set in the shell: kept
    seen: dict[str, str] = {}

    def serve_once(server: serve.CompactorServer, *args: Any, **kwargs: Any) -> None:
        seen.update(os.environ)
        raise KeyboardInterrupt

    monkeypatch.setattr(serve.CompactorServer, "serve_forever", serve_once)
    args = build_parser().parse_args(["serve", "--port", "0", "--template", str(REPO / "template.yaml"),
                                      "--param", "FlowBudgetMs=12000"])

    assert args.run(args) == 0
    assert seen["COMPACTOR_FLOW_BUDGET_MS"] == "12000" and flow_budget_ms() == 12_000
    assert seen["POWERTOOLS_SERVICE_NAME"] == "compactor"
    assert seen["POWERTOOLS_LOG_LEVEL"] == "DEBUG"


def test_serve_rejects_an_unknown_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["serve", "--port", "0", "--param", "NoSuchParameter=1"])

    assert args.run(args) == 2
    assert "NoSuchParameter" in capsys.readouterr().err


def test_cli_parser_wires_serve_defaults() -> None:
    args = build_parser().parse_args(["serve", "--api-key", "k"])

    assert (args.host, args.port, args.api_key) == ("127.0.0.1", 8787, ["k"])
    assert args.run is serve.run


def test_model_failures_are_logged_by_cause_never_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.catalog import reset_catalog_cache
    from compactor.container import reset_router

    secret = "sk-serve-never-logged-0123456789"
    monkeypatch.setenv("SERVE_TEST_KEY", secret)
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"offers": [{
        "id": "acme/summarizer", "provider": "acme", "family": "m", "model": "m", "protocol": "chat",
        "transport": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "SERVE_TEST_KEY",
        "price_in": 0, "price_out": 0, "supports_json_mode": True}]}))
    monkeypatch.setenv("COMPACTOR_CATALOG", str(catalog))
    reset_catalog_cache()
    reset_router()
    try:
        with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact")) as url:
            messages = [{"role": "user", "content": f"step {i} " * 40} for i in range(12)]
            response = httpx.post(f"{url}/compact", json={"messages": messages, "keep_recent": 2}, timeout=60)
    finally:
        reset_catalog_cache()
        reset_router()
    assert response.status_code == 200 and response.json()["compacted"] is False
    logged = capsys.readouterr().err
    assert "model call fell back x1: cannot reach 127.0.0.1 (offer acme/summarizer); fix: check base_url" in logged
    assert secret not in logged


@pytest.mark.parametrize("headers", [{"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"},
                                     {}])
def test_the_report_page_runs_only_what_declares_json(open_server: str, headers: dict[str, str]) -> None:
    # Any body was compacted: a form (text/plain) or a typeless fetch on any site the user visited could run a
    # compaction with the server's catalog (a paid one too) without a CORS preflight. Only JSON is taken now.
    payload = json.dumps({"transcript": REPORT_TRANSCRIPT}).encode()
    response = httpx.post(open_server.removesuffix("/v1") + "/report", content=payload, headers=headers)

    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert httpx.post(open_server.removesuffix("/v1") + "/report", content=payload,
                      headers={"Content-Type": "application/json; charset=utf-8"}).status_code == 200


COMPACT_BODY = json.dumps({"messages": TRANSCRIPT}).encode()


@pytest.mark.parametrize("path", ["/compact", "/expand", "/flows", "/flows/normalize", "/uploads"])
def test_a_body_without_a_content_type_is_415_without_a_key(open_server: str, path: str) -> None:
    # A page on any site can make the browser post a body without a type (a fetch of a Blob, no CORS preflight);
    # the function took it as JSON, so the user's keyless server ran the compaction, with its catalog's paid offers.
    response = httpx.post(f"{open_server}{path}", content=COMPACT_BODY)

    assert response.status_code == 415
    assert response.json()["error"] == {"message": "the body has no Content-Type: send it as application/json",
                                        "type": "invalid_request_error", "code": "unsupported_media_type"}
    assert "access-control-allow-origin" not in response.headers


def test_a_body_without_a_content_type_is_taken_with_a_key_as_deployed(keyed_server: str) -> None:
    # A browser cannot send the key to another site without a preflight, which the server never allows.
    response = httpx.post(f"{keyed_server}/compact", content=COMPACT_BODY, headers={"x-api-key": API_KEY})

    assert response.status_code == 200 and response.json()["messages"] == TRANSCRIPT


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # another port of localhost: another server's page
    {"Origin": "https://attacker.example"},
    {"Origin": "http://localhost:3000"},
    {"Origin": "null"},  # a sandboxed frame or a file
    {"Origin": "http://[::1"},  # no URL at all: it was a 500 internal_error
])
def test_a_post_another_sites_page_sent_is_403(open_server: str, headers: dict[str, str]) -> None:
    # With a JSON type a browser preflights first; as text/plain (a form) it does not. Either way the body went to
    # the function, and a form's JSON-looking text/plain body was then the function's 415 after the request was in.
    for content_type in ("application/json", "text/plain"):
        response = httpx.post(f"{open_server}/compact", content=COMPACT_BODY,
                              headers={**headers, "Content-Type": content_type})

        assert response.status_code == 403, (headers, content_type)
        assert response.json()["error"]["code"] == "cross_site_request"
    report = httpx.post(open_server.removesuffix("/v1") + "/report",
                        content=json.dumps({"transcript": REPORT_TRANSCRIPT}),
                        headers={**headers, "Content-Type": "application/json"})
    assert report.status_code == 403 and report.json()["error"]["code"] == "cross_site_request"


def test_the_servers_own_pages_and_api_clients_are_served(open_server: str) -> None:
    own = open_server.removesuffix("/v1")
    for headers in ({"Sec-Fetch-Site": "same-origin", "Origin": own}, {"Sec-Fetch-Site": "none"}, {}):
        response = httpx.post(f"{open_server}/compact", json={"messages": TRANSCRIPT}, headers=headers)

        assert response.status_code == 200, headers
    # A cross-site GET reads nothing (no CORS header) and changes nothing: it is answered.
    assert httpx.get(f"{open_server}/healthz", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8787", "127.0.0.1.nip.io"])
def test_another_host_name_is_403_without_a_key(open_server: str, host: str) -> None:
    # DNS rebinding: attacker.example resolved to 127.0.0.1 makes the server that site's origin in the browser, so
    # its page could post with a JSON type and read every answer (the usage ledger, jobs, compactions).
    for method, path in (("GET", "/usage"), ("POST", "/compact")):
        response = httpx.request(method, f"{open_server}{path}", json={"messages": TRANSCRIPT}, headers={"Host": host})

        assert response.status_code == 403, (method, host)
        assert response.json()["error"]["code"] == "cross_site_request"
    port = open_server.removesuffix("/v1").rsplit(":", 1)[1]
    for local in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "app.localhost"):
        assert httpx.get(f"{open_server}/usage", headers={"Host": local}).status_code == 200, local


def test_a_host_name_is_served_with_a_key(keyed_server: str) -> None:
    response = httpx.get(f"{keyed_server}/usage", headers={"Host": "devbox.lan:8787", "x-api-key": API_KEY})

    assert response.status_code == 200


def test_no_answer_allows_another_origin(open_server: str) -> None:
    # No CORS header on any answer, a preflight's included: another site's page can never read an answer.
    origin = {"Origin": "https://attacker.example"}
    answers = [
        httpx.options(f"{open_server}/compact", headers={**origin, "Access-Control-Request-Method": "POST",
                                                          "Access-Control-Request-Headers": "content-type"}),
        httpx.get(f"{open_server}/healthz", headers=origin),
        httpx.get(f"{open_server}/usage", headers=origin),
        httpx.get(open_server.removesuffix("/v1") + "/", headers=origin),
    ]
    for response in answers:
        assert not [name for name in response.headers if name.lower().startswith("access-control-")], response.headers


def test_serve_listens_on_loopback_by_default() -> None:
    server = serve.create_server(port=0, code_dir=REPO / "functions" / "compact")
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()
    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"
