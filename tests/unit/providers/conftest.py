"""Offers pointing at the shared fake provider, with a test API key in the environment."""

from __future__ import annotations

import pytest

from compactor.providers.base import Offer
from fakes.provider_server import FakeProviderServer

TEST_KEY = "sk-test-0123456789abcdef"
KEY_ENV = "COMPACTOR_TEST_PROVIDER_KEY"


@pytest.fixture
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy in the environment: the pooled client sends through its sharded pools (providers/http.py)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, TEST_KEY)
    return TEST_KEY


@pytest.fixture
def chat_offer(fake_provider: FakeProviderServer, api_key: str) -> Offer:
    return Offer(id="fake/chat", provider="fake", family="fake-chat-1", model="fake-chat-1",
                 protocol="chat", transport="openai", base_url=fake_provider.base_url, api_key_env=KEY_ENV,
                 price_in=1.0, price_out=2.0)


@pytest.fixture
def decision_offer(fake_provider: FakeProviderServer, api_key: str) -> Offer:
    return Offer(id="fake/decider", provider="fake", family="fake-decider-1", model="fake-decider-1",
                 protocol="decisions", transport="decisions", base_url=fake_provider.base_url,
                 api_key_env=KEY_ENV)


@pytest.fixture
def chat_decision_offer(fake_provider: FakeProviderServer, api_key: str) -> Offer:
    return Offer(id="fake/chat-decider", provider="fake", family="fake-chat-1", model="fake-chat-1",
                 protocol="decisions", transport="chat-decisions", base_url=fake_provider.base_url,
                 api_key_env=KEY_ENV)


@pytest.fixture
def anthropic_offer(fake_provider: FakeProviderServer, api_key: str) -> Offer:
    return Offer(id="fake/claude", provider="fake-anthropic", family="claude-x", model="claude-x",
                 protocol="chat", transport="anthropic", base_url=fake_provider.root_url, api_key_env=KEY_ENV,
                 price_in=3.0, price_out=15.0)
