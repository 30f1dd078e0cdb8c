"""Failures a user can see: the compact report groups fallbacks by cause in plain words with the offer
and the fix; --strict turns any fallback into exit 3; keys never appear."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor.container import reset_router
from compactor.provider_failures import explain
from compactor_cli.main import main
from fakes.provider_server import FakeProviderServer, Reply, chat_reply

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
TRANSCRIPT = str(CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json")
SECRET = "sk-never-print-this-0123456789"


pytestmark = pytest.mark.usefixtures("bundled_catalog")  # a fresh catalog cache around every test


def catalog(tmp_path: Path, base_url: str, key_env: str | None = None) -> str:
    common = {"provider": "acme", "family": "m", "model": "m", "base_url": base_url, "price_in": 0.1,
              "price_out": 0.2, "supports_json_mode": True, **({"api_key_env": key_env} if key_env else {})}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"offers": [
        {**common, "id": "acme/decider", "protocol": "decisions", "transport": "chat-decisions"},
        {**common, "id": "acme/summarizer", "protocol": "chat", "transport": "openai"},
    ]}))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["compact", TRANSCRIPT, *args])
    captured = capsys.readouterr()
    return code, captured.err


def test_unset_key_is_named_with_offer_and_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACME_TEST_KEY_UNSET", raising=False)
    path = catalog(tmp_path, "http://127.0.0.1:9/v1", "ACME_TEST_KEY_UNSET")
    out = tmp_path / "out.json"
    code, err = run(capsys, "--catalog", path, "-o", str(out))
    assert code == 0 and out.exists()
    assert "model calls fell back" in err
    assert "ACME_TEST_KEY_UNSET is not set (offer acme/decider" in err
    assert "fix: export ACME_TEST_KEY_UNSET=<key>" in err
    reset_router()
    strict_code, strict_err = run(capsys, "--catalog", path, "-o", str(out), "--strict")
    assert strict_code == 3 and "--strict" in strict_err and out.exists()


def test_an_unset_key_is_warned_once_per_run_and_the_report_counts_every_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same warning was printed once per model call (4 times here) before the report grouped them."""
    monkeypatch.delenv("ACME_TEST_KEY_UNSET", raising=False)
    path = catalog(tmp_path, "http://127.0.0.1:9/v1", "ACME_TEST_KEY_UNSET")
    caplog.set_level("WARNING")
    for _ in range(2):  # once per run: the next run warns again
        caplog.clear()
        code, err = run(capsys, "--catalog", path, "-o", str(tmp_path / "out.json"))
        assert code == 0 and "ACME_TEST_KEY_UNSET is not set (offer acme/decider, x4)" in err
        assert [record.getMessage() for record in caplog.records if "is not set" in record.getMessage()] == [
            "offer acme/decider: API key variable ACME_TEST_KEY_UNSET is not set"]
        reset_router()


def test_an_unset_key_in_a_seal_is_named_not_blamed_on_the_provider(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A seal's call traced for the report without the operator's words: an unset key variable, which no request
    ever reached the provider with, read "127.0.0.1 refused the credentials" with the fix "check the API key", where
    decision mode names the variable and says to export it."""
    monkeypatch.delenv("ACME_TEST_KEY_UNSET", raising=False)
    path = catalog(tmp_path, "http://127.0.0.1:9/v1", "ACME_TEST_KEY_UNSET")
    code, err = run(capsys, "--catalog", path, "--mode", "seal", "-o", str(tmp_path / "out.json"))
    assert code == 0 and "1 model call fell back" in err, err
    assert "ACME_TEST_KEY_UNSET is not set (offer acme/summarizer" in err, err
    assert "fix: export ACME_TEST_KEY_UNSET=<key>" in err and "refused the credentials" not in err, err


def test_unreachable_provider_in_a_seal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "--catalog", catalog(tmp_path, "http://127.0.0.1:9/v1"), "--mode", "seal",
                    "-o", str(tmp_path / "o.json"), "--strict")
    assert code == 3
    assert "seal: unchanged" in err
    assert "cannot reach 127.0.0.1 (offer acme/summarizer, x1)" in err
    assert "fix: check base_url" in err


def test_401_and_non_json_are_grouped_and_the_key_never_shows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_provider: FakeProviderServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_TEST_KEY", SECRET)
    replies = iter([Reply(401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}}),
                    chat_reply("Sure, I would keep it.")])
    first_two = [next(replies), next(replies)]
    fake_provider.responder = lambda request: first_two.pop(0) if first_two else chat_reply("not json at all")
    code, err = run(capsys, "--catalog", catalog(tmp_path, fake_provider.base_url, "ACME_TEST_KEY"),
                    "-o", str(tmp_path / "o.json"), "--json")
    assert code == 0
    assert "401 from 127.0.0.1 (offer acme/decider, x1)" in err
    assert "model answered non-JSON (offer acme/decider" in err
    assert err.index("model answered non-JSON") < err.index("401 from")  # most frequent first
    assert SECRET not in err and SECRET not in (tmp_path / "o.json").read_text()


def test_no_problems_section_when_all_calls_succeed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "-o", str(tmp_path / "o.json"), "--strict")  # the bundled offline offers
    assert code == 0 and "problems:" not in err


@pytest.mark.parametrize(("kind", "message", "status", "cause"), [
    ("auth_error", "API key variable K is not set", None, "K is not set"),
    ("auth_error", "HTTP 401: bad key", 401, "401 from api.example"),
    ("exhausted: network_error", "ConnectError", None, "cannot reach api.example"),
    ("bad_response", "decision reply is not strict JSON (x)", 200, "model answered non-JSON"),
    ("bad_response", "decision reply was cut off (finish_reason length)", 200, "model answer cut off at max_tokens"),
    # a refusal (OpenAI's refusal, Anthropic's stop_reason refusal) read as "unusable answer: check the transport"
    ("bad_response", "decision reply refused or filtered (finish_reason content_filter)", 200,
     "model refused the request, or a content filter stopped its answer"),
    ("bad_response", "output refused or filtered (finish_reason content_filter)", None,
     "model refused the request, or a content filter stopped its answer"),
    ("rate_limit", "HTTP 429", 429, "rate limited by api.example"),
    ("auth_error", "HTTP 429: You exceeded your current quota", 429,
     "429 from api.example: the account has no credit left"),
    ("auth_error", "HTTP 402: Insufficient credits", 402, "402 from api.example: the account has no credit left"),
    ("auth_error", "HTTP 400: Your credit balance is too low to access the Anthropic API.", 400,
     "400 from api.example: the account has no credit left"),
    ("no_candidates", "no offer satisfies the policy", None, "no offer could take this call"),
    ("bad_request", "HTTP 301: redirected to https://api.example/v1/chat/completions", 301,
     "api.example redirects (301)"),
])
def test_explain_in_plain_words(kind: str, message: str, status: int | None, cause: str) -> None:
    words, fix = explain(kind, message, status, "api.example")
    assert words == cause and fix


def test_a_404_points_at_the_base_url_and_the_path_the_transport_appends() -> None:
    """A 404 is most often a base_url one path segment off (``https://api.anthropic.com/v1``, to which the anthropic
    transport appends ``/v1/messages``; a vLLM root without ``/v1``): the fix names the base_url and each transport's
    path (docs/providers.md), where it named the model and the transport only."""
    cause, fix = explain("bad_request", "HTTP 404: Not Found", 404, "api.anthropic.com")
    assert cause == "404 from api.anthropic.com"
    assert "base_url" in fix and "/v1/messages" in fix and "/chat/completions" in fix and "model" in fix
    assert "base_url" not in explain("bad_request", "HTTP 400: invalid model", 400, "h")[1]
