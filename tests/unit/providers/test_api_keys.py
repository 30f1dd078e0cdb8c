"""API keys: environment variables (local) and secrets read through the installed resolver."""

from __future__ import annotations

import re
import asyncio
import dataclasses
import threading
from collections.abc import Iterator

import pytest

from compactor.providers import http, keys
from compactor.providers.base import Offer, ProviderError

OFFER = Offer(id="o", provider="p", family="f", model="m", protocol="chat", transport="openai",
              base_url="http://127.0.0.1:1/v1")


@pytest.fixture
def resolver() -> Iterator[dict[str, str]]:
    """A dict-backed secret store installed as the resolver; the previous one comes back afterwards."""
    store: dict[str, str] = {}
    previous = keys._secret_resolver, keys._cached_secret
    keys.set_secret_resolver(lambda name: store[name])
    yield store
    keys.set_secret_resolver(*previous)


async def test_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await http.bearer_headers(OFFER) == ({}, None)
    offer = dataclasses.replace(OFFER, api_key_env="K_ENV")
    monkeypatch.setenv("K_ENV", "  k-value  ")
    assert await http.bearer_headers(offer) == ({"Authorization": "Bearer k-value"}, "k-value")
    monkeypatch.setenv("K_ENV", "line\nbreak")
    with pytest.raises(ProviderError) as caught:
        await http.bearer_headers(offer)
    assert caught.value.kind == "auth_error" and "line" not in caught.value.message
    monkeypatch.delenv("K_ENV")
    with pytest.raises(ProviderError) as unnamed:
        keys.api_key(offer)
    assert re.search("API key variable K_ENV is not set", unnamed.value.detail)


def test_secret_key_and_env_precedence(resolver: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    offer = dataclasses.replace(OFFER, api_key_env="K_ENV", api_key_secret="prod/openai")
    monkeypatch.delenv("K_ENV", raising=False)
    resolver["prod/openai"] = "sk-from-secret-123"
    assert keys.api_key(offer) == "sk-from-secret-123"
    monkeypatch.setenv("K_ENV", "sk-local-456")  # local runs: the variable wins
    assert keys.api_key(offer) == "sk-local-456"


def test_secret_failures_name_the_secret_never_a_value(resolver: dict[str, str]) -> None:
    offer = dataclasses.replace(OFFER, api_key_secret="prod/missing")
    with pytest.raises(ProviderError) as caught:
        keys.api_key(offer)
    assert caught.value.kind == "auth_error"
    assert caught.value.detail == "API key secret prod/missing cannot be read (KeyError)"
    resolver["prod/missing"] = "  "
    with pytest.raises(ProviderError) as unnamed:
        keys.api_key(offer)
    assert re.search("API key secret prod/missing is empty", unnamed.value.detail)


def test_a_failure_names_a_secret_given_by_its_arn_without_the_operators_account(resolver: dict[str, str]) -> None:
    """The operator's words (logs, doctor) named the whole ARN, account id and region included; the caller's name
    neither."""
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:compactor/openai-AbCdEf"
    with pytest.raises(ProviderError) as caught:
        keys.api_key(dataclasses.replace(OFFER, api_key_secret=arn))
    assert caught.value.detail == "API key secret compactor/openai-AbCdEf cannot be read (KeyError)"
    assert "123456789012" not in caught.value.detail and "eu-west-1" not in caught.value.detail


def test_secret_without_a_store() -> None:
    previous = keys._secret_resolver, keys._cached_secret
    keys.set_secret_resolver(None)
    try:
        with pytest.raises(ProviderError) as unnamed:
            keys.api_key(dataclasses.replace(OFFER, api_key_secret="s"))
        assert re.search("no secret store is configured", unnamed.value.detail)
    finally:
        keys.set_secret_resolver(*previous)


async def test_a_secret_is_read_off_the_event_loop(resolver: dict[str, str]) -> None:
    released = threading.Event()

    def slow_store(name: str) -> str:  # a store that answers only once the event loop has moved on
        return "sk-read-in-a-thread" if released.wait(10) else "blocked"

    keys.set_secret_resolver(slow_store)

    async def loop_moves_on() -> None:
        await asyncio.sleep(0)
        released.set()

    key, _ = await asyncio.gather(keys.resolve_key(dataclasses.replace(OFFER, api_key_secret="s")), loop_moves_on())
    assert key == "sk-read-in-a-thread"


async def test_a_kept_secret_is_taken_on_the_event_loop(resolver: dict[str, str],
                                                        thread_hops: list[object]) -> None:
    """A key the store keeps comes without a thread (and without asking the store); one it does not keep, or a
    kept value that is no usable key, goes the usual way."""
    kept = {"s": "  sk-kept-on-the-loop  ", "bad": ""}
    read: list[str] = []

    def store(name: str) -> str:
        read.append(name)
        return "sk-read-in-a-thread"

    keys.set_secret_resolver(store, kept.get)
    threads = thread_hops
    assert await keys.resolve_key(dataclasses.replace(OFFER, api_key_secret="s")) == "sk-kept-on-the-loop"
    assert threads == [] and read == []
    assert await keys.resolve_key(dataclasses.replace(OFFER, api_key_secret="other")) == "sk-read-in-a-thread"
    assert len(threads) == 1 and read == ["other"]
    with pytest.raises(ProviderError) as unnamed:
        await keys.resolve_key(dataclasses.replace(OFFER, api_key_secret="bad"))
    assert re.search("API key secret bad is empty", unnamed.value.detail)
    keys.set_secret_resolver(store)  # a resolver alone drops the previous one's kept values
    assert await keys.resolve_key(dataclasses.replace(OFFER, api_key_secret="s")) == "sk-read-in-a-thread"
    assert len(threads) == 2
