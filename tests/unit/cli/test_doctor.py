"""compactor doctor: catalog checks without sending anything, then one tiny call per offer with --call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor_cli.main import main
from fakes.provider_server import FakeProviderServer, chat_reply

KEY_ENV = "DOCTOR_TEST_KEY"


def write(tmp_path: Path, offers: list[dict]) -> str:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"offers": offers}))
    return str(path)


def offers(base_url: str, **extra: object) -> list[dict]:
    common = {"provider": "acme", "family": "m", "model": "m", "base_url": base_url, "price_in": 1.0,
              "price_out": 2.0, "supports_json_mode": True, **extra}
    return [{**common, "id": "acme/decider", "protocol": "decisions", "transport": "chat-decisions"},
            {**common, "id": "acme/summarizer", "protocol": "chat", "transport": "openai"}]


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def test_missing_roles_and_keys_are_reported_without_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           fake_provider: FakeProviderServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    only_chat = [o for o in offers(fake_provider.base_url, api_key_env=KEY_ENV) if o["protocol"] == "chat"]
    only_chat[0]["supports_json_mode"] = False
    code, out = doctor(capsys, "--catalog", write(tmp_path, only_chat))
    assert code == 1
    assert "PROBLEM no decider" in out and "PROBLEM no summarizer" in out
    assert f"PROBLEM {KEY_ENV} is not set" in out
    assert fake_provider.requests == []  # nothing was sent


def test_call_prints_latency_usage_cost_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 fake_provider: FakeProviderServer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-doctor-test-123456")
    path = write(tmp_path, offers(fake_provider.base_url, api_key_env=KEY_ENV))
    code, out = doctor(capsys, "--catalog", path)
    assert code == 0 and "key: resolves" in out and fake_provider.requests == []
    fake_provider.enqueue(chat_reply(json.dumps({"answers": {"ok": {"type": "noul", "noul": 0.9}}}),
                                     prompt_tokens=300, completion_tokens=12),
                          chat_reply('{"ok": true}', prompt_tokens=20, completion_tokens=5))
    code, out = doctor(capsys, "--catalog", path, "--call")
    assert code == 0, out
    assert "tokens 300 in / 12 out, cost $0.000324, JSON ok" in out
    assert "tokens 20 in / 5 out, cost $0.000030, JSON ok" in out
    assert " ms, " in out and "doctor: all checks passed" in out
    assert len(fake_provider.requests) == 2
    assert fake_provider.requests[1].json["response_format"] == {"type": "json_object"}
    fake_provider.enqueue(chat_reply("I am not JSON"), chat_reply("Neither am I"))
    code, out = doctor(capsys, "--catalog", path, "--call")
    assert code == 1
    assert "call failed" in out and "model answered non-JSON" in out
    assert "JSON mode NOT working" in out
    assert "sk-doctor-test-123456" not in out


def test_an_answer_nested_too_deep_is_json_not_working(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        fake_provider: FakeProviderServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The model's text nested past the parser's recursion limit: json.loads raises RecursionError, which ended
    # the doctor with a traceback instead of the report that JSON mode does not work.
    monkeypatch.setenv(KEY_ENV, "sk-doctor-test-123456")
    path = write(tmp_path, offers(fake_provider.base_url, api_key_env=KEY_ENV))
    fake_provider.enqueue(chat_reply(json.dumps({"answers": {"ok": {"type": "noul", "noul": 0.9}}})),
                          chat_reply("[" * 100_000))
    code, out = doctor(capsys, "--catalog", path, "--call")
    assert "JSON mode NOT working" in out, out


def test_unreadable_catalog_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["doctor", "--catalog", str(bad)]) == 2
    assert "invalid JSON" in capsys.readouterr().err


def test_a_probe_spent_on_reasoning_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            fake_provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/providers.md "Reasoning models": a reasoning model whose reasoning took the probe's whole output limit
    # answered nothing, which doctor printed as "JSON mode NOT working".
    monkeypatch.setenv(KEY_ENV, "sk-doctor-test-123456")
    summarizer = [{**o, "reasoning_effort": "minimal"} for o in offers(fake_provider.base_url, api_key_env=KEY_ENV)
                  if o["protocol"] == "chat"]
    fake_provider.enqueue(chat_reply("", finish_reason="length", completion_tokens=1040, reasoning_tokens=1040))
    code, out = doctor(capsys, "--catalog", write(tmp_path, summarizer), "--call")
    assert code == 1
    assert "call failed after" in out and "the model spent its output budget on reasoning and gave no answer" in out
    assert "JSON mode NOT working" not in out
    assert fake_provider.requests[0].json["max_completion_tokens"] == 16 + 1024


def test_a_priced_offer_of_another_model_than_claude_without_cache_prices_is_noted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Before, nothing said that an OpenAI (or Nova) offer stating no cache price has its provider's cache priced at
    # Claude's 10 % (and 125 %) of price_in, and recorded as a known cost (docs/billing.md).
    monkeypatch.setenv(KEY_ENV, "sk-doctor-test-123456")
    listed = offers("https://api.openai.com/v1", api_key_env=KEY_ENV)
    nova = {**listed[1], "id": "aws/nova", "transport": "bedrock", "model": "amazon.nova-lite-v1:0",
            "base_url": None, "api_key_env": None}
    claude = {**nova, "id": "aws/claude", "model": "us.anthropic.claude-sonnet-4-5-20250929-v1:0"}
    stated = {**listed[1], "id": "openai/stated", "price_cached_in": 0.25}
    code, out = doctor(capsys, "--catalog", write(tmp_path, [*listed, nova, claude, stated]))
    assert [line for line in out.splitlines() if "PROBLEM" in line] == [  # a note is no problem
        "  PROBLEM no AWS credentials for Bedrock; fix: configure a profile or role with bedrock:InvokeModel"] * 2 \
        or "PROBLEM" not in out, out
    notes = [line for line in out.splitlines() if line.startswith("  note:")]
    assert notes == [
        "  note: no price_cached_in: the provider's cache would be priced at Claude's 10% of price_in, which is not "
        "this model's price; state it (the traces name it as default_cache_prices)"] * 2 + [
        "  note: no price_cached_in or price_cache_write: the provider's cache would be priced at Claude's 10% and "
        "125% of price_in, which is not this model's price; state it (the traces name it as default_cache_prices)"]
    assert out.index("aws/nova") < out.index(notes[2].strip()) < out.index("aws/claude")


def test_it_prints_the_template_parameters_the_catalog_needs_deployed(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/providers.md "Deploying with real providers": the functions may call only the Bedrock ids listed in
    BedrockModelIds (a cross-Region inference profile and the model it routes to) and read only the secrets in
    ProviderKeySecretArns; one left out is an AccessDeniedException on every deployed call. doctor prints the values
    for the catalog, and says which offer's key no deployed function could have; it printed nothing of it."""
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    repo = Path(__file__).resolve().parents[3]
    code, out = doctor(capsys, "--catalog", str(repo / "docs" / "catalogs" / "bedrock.json"))
    assert code == 0
    assert ("deploy with: BedrockModelIds=us.amazon.nova-micro-v1:0,amazon.nova-micro-v1:0,"
            "us.anthropic.claude-3-5-haiku-20241022-v1:0,anthropic.claude-3-5-haiku-20241022-v1:0") in out
    assert "ProviderKeySecretArns" not in out

    monkeypatch.setenv(KEY_ENV, "sk-doctor-local-1")
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:compactor/acme-AbCdEf"
    catalog = offers("http://127.0.0.1:9/v1", api_key_env=KEY_ENV)
    catalog[0]["api_key_secret"] = arn
    code, out = doctor(capsys, "--catalog", write(tmp_path, catalog))
    assert f"deploy with: ProviderKeySecretArns={arn}" in out and "BedrockModelIds" not in out
    assert f"deploy: offer acme/summarizer names its API key by api_key_env ({KEY_ENV}) alone" in out
    assert "sk-doctor-local-1" not in out
