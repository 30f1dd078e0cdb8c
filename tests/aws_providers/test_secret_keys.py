"""API keys from Secrets Manager (moto) through Powertools Parameters, with the TTL cache."""

from __future__ import annotations

import re
import dataclasses
import json
import time
from collections.abc import Iterator

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

import compactor_aws  # noqa: F401  (installs the Secrets Manager resolver)
from compactor.providers.base import ChatRequest, Offer, ProviderError
from compactor.providers.keys import api_key
from compactor.providers.openai import OpenAITransport
from compactor.providers.keys import resolve_key
from compactor_aws import secrets as secret_store
from compactor_aws.secrets import SECRET_TTL_ENV
from fakes.provider_server import FakeProviderServer

OFFER = Offer(id="o", provider="p", family="f", model="m", protocol="chat", transport="openai",
              base_url="http://127.0.0.1:1/v1", api_key_secret="compactor/openai")


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "eu-west-1")):
        monkeypatch.setenv(name, value)
    parameters.clear_caches()
    secret_store.forget_keys()
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="eu-west-1")
    parameters.clear_caches()
    secret_store.forget_keys()


def test_key_read_by_name_and_arn_and_cached(secrets: object, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = secrets.create_secret(Name="compactor/openai", SecretString="sk-secret-one-123")["ARN"]
    assert api_key(OFFER) == "sk-secret-one-123"
    assert api_key(dataclasses.replace(OFFER, api_key_secret=arn)) == "sk-secret-one-123"
    secrets.put_secret_value(SecretId="compactor/openai", SecretString="sk-secret-two-456")
    assert api_key(OFFER) == "sk-secret-one-123"  # within the TTL: the cached value
    monkeypatch.setenv(SECRET_TTL_ENV, "0")
    assert api_key(OFFER) == "sk-secret-two-456"  # TTL 0: read again


async def test_a_warm_key_is_read_once_per_ttl_and_taken_on_the_loop(
        secrets: object, monkeypatch: pytest.MonkeyPatch, thread_hops: list[object]) -> None:
    """Within the TTL, every call's key comes from the container's keeping, without a thread or a read; past it,
    one read on a thread gives the new value."""
    secrets.create_secret(Name="compactor/openai", SecretString=json.dumps({"api_key": "sk-first-111"}))
    reads: list[str] = []
    fetch = secret_store._fetch
    monkeypatch.setattr(secret_store, "_fetch", lambda name, ttl_s: reads.append(name) or fetch(name, ttl_s))
    threads = thread_hops
    assert await resolve_key(OFFER) == "sk-first-111"
    assert (len(reads), len(threads)) == (1, 1)
    secrets.put_secret_value(SecretId="compactor/openai", SecretString="sk-second-222")
    for _ in range(5):
        assert await resolve_key(OFFER) == "sk-first-111"
    assert (len(reads), len(threads)) == (1, 1)
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 301)  # past the default TTL of 300 s
    assert await resolve_key(OFFER) == "sk-second-222"
    assert (len(reads), len(threads)) == (2, 2)


async def test_a_shapeless_secret_is_read_once_per_ttl_and_a_failed_read_not_kept(
        secrets: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret holding no usable key keeps its error for the TTL (every call fails at once, without reading the
    store again); a read that failed (no such secret) keeps nothing, so the secret is read as soon as it exists."""
    reads: list[str] = []
    fetch = secret_store._fetch
    monkeypatch.setattr(secret_store, "_fetch", lambda name, ttl_s: reads.append(name) or fetch(name, ttl_s))
    for _ in range(2):
        with pytest.raises(ProviderError) as unnamed:
            await resolve_key(OFFER)
        assert re.search("cannot be read", unnamed.value.detail)
    assert len(reads) == 2
    secrets.create_secret(Name="compactor/openai", SecretString=json.dumps({"key": "sk-misnamed-333"}))
    for _ in range(5):
        with pytest.raises(ProviderError) as caught:
            await resolve_key(OFFER)
        assert caught.value.kind == "auth_error" and "without a text" in caught.value.detail
    assert len(reads) == 3
    secrets.put_secret_value(SecretId="compactor/openai", SecretString="sk-fixed-444")
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 301)
    assert await resolve_key(OFFER) == "sk-fixed-444"
    assert len(reads) == 4


def test_json_secret_with_api_key(secrets: object) -> None:
    secrets.create_secret(Name="compactor/openai", SecretString=json.dumps({"api_key": "sk-in-json-789"}))
    assert api_key(OFFER) == "sk-in-json-789"


@pytest.mark.parametrize("stored", [None, json.dumps({"key": "x"})])
def test_missing_or_shapeless_secret_is_auth_error(secrets: object, stored: str | None) -> None:
    if stored is not None:
        secrets.create_secret(Name="compactor/openai", SecretString=stored)
    with pytest.raises(ProviderError) as caught:
        api_key(OFFER)
    assert caught.value.kind == "auth_error" and "compactor/openai" in caught.value.detail
    assert stored is None or "x" not in caught.value.detail.split("without")[0]


async def test_transport_sends_the_secret_and_scrubs_it(secrets: object, fake_provider: FakeProviderServer) -> None:
    secrets.create_secret(Name="compactor/openai", SecretString="sk-secret-one-123")
    offer = dataclasses.replace(OFFER, base_url=fake_provider.base_url)
    await OpenAITransport().chat(offer, ChatRequest([{"role": "user", "content": "hi"}]), 10)
    assert fake_provider.requests[0].headers["authorization"] == "Bearer sk-secret-one-123"
    from fakes.provider_server import Reply

    fake_provider.enqueue(Reply(401, {"error": {"message": "bad key sk-secret-one-123"}}))
    with pytest.raises(ProviderError) as caught:
        await OpenAITransport().chat(offer, ChatRequest([{"role": "user", "content": "hi"}]), 10)
    assert "sk-secret-one-123" not in caught.value.message


def test_secrets_are_read_with_a_client_of_the_containers_session(secrets: object,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Powertools' default provider builds a boto3 session of its own (every service's handlers, botocore's whole
    CA bundle per connection): 62-127 ms of CPU at a container's first read against 13-17 ms for a client of the
    container's session. One client, built once, serves every read."""
    from compactor_aws import aws_session

    built: list[str] = []
    client = aws_session.client
    monkeypatch.setattr(aws_session, "client",
                        lambda service, **kwargs: built.append(service) or client(service, **kwargs))
    secrets.create_secret(Name="compactor/openai", SecretString="sk-session-555")
    secrets.create_secret(Name="compactor/other", SecretString="sk-session-666")
    assert api_key(OFFER) == "sk-session-555"
    assert api_key(dataclasses.replace(OFFER, api_key_secret="compactor/other")) == "sk-session-666"
    assert built == ["secretsmanager"]


@pytest.mark.parametrize(("code", "fix"), [
    ("ResourceNotFoundException", "no secret of that name"),
    ("AccessDeniedException", "ProviderKeySecretArns"),
    ("DecryptionFailure", "kms:Decrypt"),
])
def test_a_secret_that_cannot_be_read_names_secrets_managers_reason_and_its_fix(
        secrets: object, monkeypatch: pytest.MonkeyPatch, code: str, fix: str) -> None:
    """What the operator reads (the function's WARNING line, ``compactor doctor``, the CLI report) names Secrets
    Manager's error code, never its message, and the fix for it: a missing grant, a missing secret and a KMS key the
    role may not use each have their own. It named Powertools' wrapper, ``GetParameterError``, for every one of them."""
    from botocore.stub import Stubber

    from compactor.provider_failures import explain

    client = boto3.client("secretsmanager", region_name="eu-west-1")
    stubber = Stubber(client)
    stubber.add_client_error("get_secret_value", service_error_code=code, service_message="secret words of AWS",
                             http_status_code=400)
    stubber.activate()
    monkeypatch.setattr(secret_store.PROVIDER, "get", lambda: parameters.SecretsProvider(boto3_client=client))
    with pytest.raises(ProviderError) as caught:
        api_key(OFFER)
    detail = caught.value.detail
    assert caught.value.kind == "auth_error"
    assert f"API key secret compactor/openai cannot be read ({code})" in detail
    assert "GetParameterError" not in detail and "secret words" not in detail
    assert fix in explain("auth_error", detail)[1]


def test_a_secret_read_without_a_region_names_botocores_reason(secrets: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a ClientError: the error's own type, as docs/providers.md shows (``NoRegionError``)."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    secret_store.forget_keys()
    with pytest.raises(ProviderError) as caught:
        api_key(OFFER)
    assert "API key secret compactor/openai cannot be read (NoRegionError)" in caught.value.detail
