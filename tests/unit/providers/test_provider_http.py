"""Pooled clients per event loop, error mapping and secret scrubbing."""

from __future__ import annotations

import asyncio
import time

import pytest

from compactor.providers import http
from compactor.providers.base import ProviderError
from fakes.provider_server import FakeProviderServer


def test_one_client_per_loop_and_stale_loops_dropped() -> None:
    async def current():
        return http.client()

    first_loop = asyncio.new_event_loop()
    try:
        a = first_loop.run_until_complete(current())
        assert first_loop.run_until_complete(current()) is a
    finally:
        first_loop.close()
    second_loop = asyncio.new_event_loop()
    try:
        b = second_loop.run_until_complete(current())
        assert b is not a
        assert first_loop not in http._clients
        second_loop.run_until_complete(http.aclose_client())
        assert second_loop.run_until_complete(current()) is not b
        second_loop.run_until_complete(http.aclose_client())
    finally:
        second_loop.close()


async def test_connections_are_reused_within_a_loop(fake_provider: FakeProviderServer) -> None:
    url = f"{fake_provider.base_url}/chat/completions"
    replies = [await http.post_json(url, {"n": i}, headers={}, timeout_s=10, max_body_bytes=1 << 20)
               for i in range(3)]
    assert [reply.status for reply in replies] == [200, 200, 200]
    assert [request.json for request in fake_provider.requests] == [{"n": 0}, {"n": 1}, {"n": 2}]
    await http.aclose_client()


async def test_concurrent_calls_do_not_wait_for_each_other(fake_provider: FakeProviderServer) -> None:
    url = f"{fake_provider.base_url}/decisions"
    calls = [http.post_json(url, {}, headers={}, timeout_s=30, max_body_bytes=1 << 20) for _ in range(8)]
    assert all(reply.status == 200 for reply in await asyncio.gather(*calls))


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, b"{}", None),
        (429, b"", "rate_limit"),
        (400, b'{"error": "prompt is too long"}', "context_overflow"),
        # Bedrock's words (passed on by gateways such as LiteLLM in front of it)
        (400, b'{"error": {"message": "Input is too long for requested model."}}', "context_overflow"),
        (400, b'{"message": "bad role"}', "bad_request"),
        (413, b"payload too large", "bad_request"),
        (599, b"", "upstream_error"),
    ],
)
def test_error_for_status(status: int, body: bytes, kind: str | None) -> None:
    error = http.error_for_status(status, body)
    assert (error.kind if error else None) == kind


def test_a_validation_errors_echo_of_the_request_is_not_its_message() -> None:
    """FastAPI's 422 (vLLM, most Python model servers) echoes the request in each entry's ``input``: the transcript's
    word "context" made it a context overflow, and its message showed the transcript's start. The entries'
    ``loc: msg`` are the message now."""
    import json

    echoed = {"messages": [{"role": "user", "content": "the compaction context of this agent"}], "max_tokens": -1}
    body = json.dumps({"detail": [{"type": "greater_than_equal", "loc": ["body", "max_tokens"],
                                   "msg": "Input should be greater than or equal to 1", "input": echoed}]}).encode()
    error = http.error_for_status(422, body)
    assert error is not None and error.kind == "bad_request"
    assert error.message == "HTTP 422: body.max_tokens: Input should be greater than or equal to 1"
    overflow = json.dumps({"detail": [{"loc": ["body"], "msg": "maximum context length is 8192 tokens"}]}).encode()
    assert http.error_for_status(400, overflow).kind == "context_overflow"  # the server's own words still count


def test_scrub_known_secret_and_lookalikes() -> None:
    text = "key abc123secret, header Bearer xyz.789 and sk-proj-ABCDEFGH12"
    cleaned = http.safe_message(text, ["abc123secret"])
    assert "abc123secret" not in cleaned and "xyz.789" not in cleaned and "ABCDEFGH12" not in cleaned
    assert cleaned.count("[redacted]") == 3


def test_a_huge_error_body_is_classified_without_holding_the_loop() -> None:
    # An error body may be as large as an answer (8 MiB): the context words' search and the scrub ran over all of
    # it, about 2 s of CPU on the event loop for a 400 of "x x x …"; only its start is looked at now.
    body = b"x " * (4 * 1024 * 1024)
    started = time.process_time()
    error = http.error_for_status(400, body, ("sk-abcdefabcdef",))
    assert time.process_time() - started < 0.3
    assert error is not None and error.kind == "bad_request" and error.message.startswith("HTTP 400: x x x")
    assert len(error.message) == 300


@pytest.mark.parametrize("key", ["sk-proj-" + "A1b2" * 40, "0123456789abcdef" * 2])
def test_a_key_cut_by_the_bound_is_not_shown(key: str) -> None:
    # Only the start of an error text is scrubbed: a key the cut splits in two must not show its first half.
    for padding in range(http.ERROR_TEXT_MAX_CHARS - len(key), http.ERROR_TEXT_MAX_CHARS + 1, 7):
        message = http.safe_message(" " * padding + key + " tail", (key,))
        assert key[:6] not in message
    assert http.safe_message("Invalid key " + key + " x" * 8000, (key,)).startswith("Invalid key [redacted] x x")


KEY = "sk-proj-Abc123Def456Ghi789"


@pytest.mark.parametrize("echo", [
    "sk-proj-Abc\n Def456Ghi789".replace("Def", "123Def"),  # a line break and an indent within the key
    "<pre>sk-proj-Abc123\r\n<br>Def456Ghi789</pre>".replace("<br>", ""),  # an HTML error page's wrapped line
    "s k - p r o j - A b c 1 2 3 D e f 4 5 6 G h i 7 8 9",  # a space between every character
    "sk-proj-Abc123Def456Gh\ti789",  # a tab
])
def test_a_key_echoed_split_by_whitespace_is_scrubbed(echo: str) -> None:
    """A provider echoing the key wrapped over lines (an HTML error page, a pretty-printed body) showed its pieces
    once the message's whitespace was folded: only the key's exact characters, and lookalikes of 6+ characters
    after ``sk-``, were redacted."""
    body = f"<html><body><h1>401</h1>Invalid API key: {echo} (check your account)</body></html>"
    message = http.safe_message(body, (KEY,))
    assert "Abc" not in message and "789" not in message, message
    assert "[redacted]" in message and message.endswith("(check your account)</body></html>")
    error = http.error_for_status(401, body.encode(), (KEY,))
    assert error is not None and "789" not in error.message


def test_a_split_key_cut_by_the_bound_shows_no_piece() -> None:
    """The bound on the text looked at (ERROR_TEXT_MAX_CHARS) may fall between a split key's pieces: the pieces
    before it are redacted too."""
    key = "0123456789abcdef" * 2  # no lookalike pattern knows it
    first, second = key[:14], key[14:]
    padding = "x " * ((http.ERROR_TEXT_MAX_CHARS - len(first) - 1) // 2)
    text = padding + first + " " + second + " tail" * 10
    assert len(padding + first) < http.ERROR_TEXT_MAX_CHARS < len(padding + first + " " + second)
    assert first not in http.scrub(http.bounded_text(text), (key,))
    assert first not in http.safe_message(text, (key,))


def test_whitespace_between_words_is_not_read_as_a_split_key() -> None:
    message = http.safe_message("the key sk- was refused; proj is unknown", (KEY,))
    assert message == "the key sk- was refused; proj is unknown"
