"""Catalog loading: sources, observations, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactor.catalog import (
    CATALOG_ENV, CatalogError, bundled_catalog_path, get_catalog, load_catalog, reset_catalog_cache,
)

DECIDER = {
    "id": "acme/small-decider", "provider": "acme", "family": "small-decider-1", "model": "small-decider-1",
    "protocol": "decisions", "transport": "decisions", "base_url": "https://api.acme.example/v1/",
    "api_key_env": "ACME_API_KEY", "price_in": 0.05, "price_out": 0.2, "context": 32000,
    "supports_json_mode": True, "no_log": True, "has_tee": False, "disabled": False,
}
CHAT = {
    "id": "acme/chat", "provider": "acme", "family": "chat-1", "model": "chat-1", "protocol": "chat",
    "transport": "openai", "base_url": "http://127.0.0.1:9/v1", "price_in": 0.5, "price_out": 1,
    "tier": "pro", "latency_ms": 800, "cache_hot": True, "quality": 0.7, "notes_are_null": None,
}
BUILTIN = {"id": "builtin/x", "provider": "builtin", "family": "x", "model": "x", "protocol": "chat",
           "transport": "builtin", "base_url": None, "price_in": 0, "price_out": 0}


def write(tmp_path: Path, content: Any, name: str = "catalog.json") -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def test_offers_prices_and_observations(tmp_path: Path) -> None:
    envelope = ["not", ["provider_eq", "evil"]]
    catalog = load_catalog(write(tmp_path, {"offers": [DECIDER, CHAT, BUILTIN], "policy_envelope": envelope}))
    decider, chat, builtin = catalog.offers
    assert catalog.policy_envelope == envelope
    assert decider.base_url == "https://api.acme.example/v1"
    assert (decider.price_in, decider.price_out, decider.api_key_env) == (0.05, 0.2, "ACME_API_KEY")
    assert decider.observations == {"context": 32000, "supports_json_mode": True, "no_log": True,
                                    "has_tee": False, "disabled": False}
    assert chat.price_in == 0.5 and chat.price_out == 1.0
    assert chat.observations == {"tier": "pro", "latency_ms": 800, "cache_hot": True, "quality": 0.7}
    assert builtin.base_url is None and builtin.observations == {}
    assert catalog.offer("acme/chat") is chat and catalog.offer("nope") is None
    assert catalog.for_protocol("decisions") == (decider,)


def test_env_variable_replaces_bundled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CATALOG_ENV, write(tmp_path, {"offers": [CHAT]}))
    assert [offer.id for offer in load_catalog().offers] == ["acme/chat"]
    explicit = write(tmp_path, {"offers": [BUILTIN]}, "other.json")
    assert [offer.id for offer in load_catalog(explicit).offers] == ["builtin/x"]


def test_bundled_catalog_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    assert bundled_catalog_path().is_file()
    catalog = load_catalog()
    assert catalog.offers and all(offer.transport == "builtin" for offer in catalog.offers)


def test_get_catalog_is_cached_until_reset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CATALOG_ENV, write(tmp_path, {"offers": [CHAT]}))
    reset_catalog_cache()
    try:
        first = get_catalog()
        monkeypatch.setenv(CATALOG_ENV, write(tmp_path, {"offers": [BUILTIN]}, "b.json"))
        assert get_catalog() is first
        reset_catalog_cache()
        assert get_catalog().offers[0].id == "builtin/x"
    finally:
        reset_catalog_cache()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "invalid JSON"),
        ('{"offers": [], "offers": []}', "duplicate key"),
        ({"offers": [DECIDER, DECIDER]}, "duplicate offer id 'acme/small-decider'"),
        ({"offers": [{**CHAT, "transport": "decisions"}]}, "cannot serve protocol 'chat'"),
        ({"offers": [{**CHAT, "transport": "chat-decisions"}]}, "cannot serve protocol 'chat'"),
        ({"offers": [{**DECIDER, "transport": "openai"}]}, "cannot serve protocol 'decisions'"),
        ({"offers": [{**CHAT, "base_url": None}]}, "needs a base_url"),
        ({"offers": [{**BUILTIN, "base_url": "http://x.example"}]}, "builtin offers take no base_url"),
        ({"offers": [{**CHAT, "base_url": "ftp://x"}]}, "offers.0.base_url"),
        ({"offers": [{**CHAT, "transport": "grpc"}]}, "offers.0.transport"),
        ({"offers": [{**CHAT, "transport": "bedrock", "api_key_env": "K"}]}, "bedrock offers take no key"),
        ({"offers": [{**CHAT, "region": "eu-west-1"}]}, "only bedrock offers take a region"),
        ({"offers": [{**CHAT, "transport": "bedrock", "region": "Europe"}]}, "offers.0.region"),
        ({"offers": [{**CHAT, "transport": "anthropic", "base_url": None}]}, "needs a base_url"),
        ({"offers": [{**CHAT, "api_key_secret": "has space"}]}, "offers.0.api_key_secret"),
        ({"offers": [{**CHAT, "max_concurrency": 0}]}, "offers.0.max_concurrency"),
        ({"offers": [{**BUILTIN, "api_key_secret": "s"}]}, "builtin offers take no base_url"),
        ({"offers": [{**CHAT, "price_in": -1}]}, "offers.0.price_in"),
        ({"offers": [{**CHAT, "price_in": "1.0"}]}, "offers.0.price_in"),
        ({"offers": [{**CHAT, "no_log": "yes"}]}, "offers.0.no_log"),
        ({"offers": [{**CHAT, "context": 1.5}]}, "offers.0.context"),
        ({"offers": [{**CHAT, "prompt_cache": "yes"}]}, "offers.0.prompt_cache"),
        ({"offers": [{**CHAT, "cache_min_tokens": 0}]}, "offers.0.cache_min_tokens"),
        ({"offers": [{**CHAT, "cache_min_tokens": 1024.5}]}, "offers.0.cache_min_tokens"),
        ({"offers": [{**CHAT, "comment": "text"}]}, "unknown field 'comment'"),
        ({"offers": [{**CHAT, "api_key_env": "sk-literal-key"}]}, "offers.0.api_key_env"),
        ({"offers": [{k: v for k, v in CHAT.items() if k != "family"}]}, "offers.0.family"),
        ({"offers": [CHAT], "extra": 1}, "extra"),
        ({"offers": [CHAT], "policy_envelope": {"op": "top"}}, "policy_envelope"),
        ([CHAT], "catalog"),
    ],
)
def test_invalid_catalogs(tmp_path: Path, content: Any, problem: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert path in str(caught.value)
    assert problem in str(caught.value)


def test_a_key_pasted_into_api_key_env_is_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(write(tmp_path, {"offers": [{**CHAT, "api_key_env": "sk-live-123"}]}))
    assert "sk-live-123" not in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent.json")
    with pytest.raises(CatalogError, match="absent.json: cannot read"):
        load_catalog(missing)


def test_every_transport_loads_with_its_wiring(tmp_path: Path) -> None:
    secret = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:compactor/openai-AbCdEf"
    offers = [
        {**CHAT, "id": "o", "api_key_secret": secret, "max_concurrency": 2, "context": 128000},
        {**CHAT, "id": "a", "transport": "anthropic", "base_url": "https://api.anthropic.com"},
        {**CHAT, "id": "b", "transport": "bedrock", "base_url": None, "api_key_env": None, "region": "eu-west-1"},
        {**DECIDER, "id": "d"},
        {**DECIDER, "id": "cd", "transport": "chat-decisions"},
        {**DECIDER, "id": "ad", "transport": "anthropic", "base_url": "https://api.anthropic.com"},
        {**DECIDER, "id": "bd", "transport": "bedrock", "base_url": None, "api_key_env": None},
    ]
    catalog = load_catalog(write(tmp_path, {"offers": offers}))
    by_id = {offer.id: offer for offer in catalog.offers}
    assert by_id["o"].api_key_secret == secret and by_id["o"].max_concurrency == 2
    assert "max_concurrency" not in by_id["o"].observations and by_id["o"].observations["context"] == 128000
    assert by_id["b"].region == "eu-west-1" and by_id["bd"].region is None
    assert {offer.transport for offer in catalog.offers} == {"openai", "anthropic", "bedrock", "decisions",
                                                              "chat-decisions"}


def test_the_http_transports_are_those_built_over_httpx() -> None:
    from compactor.providers.registry import TRANSPORTS, _http_transports

    assert {name for name, kind in TRANSPORTS.items() if kind.http} == set(_http_transports())


def test_a_problem_names_its_offer(tmp_path: Path) -> None:
    # Before: "offers.1.price_in: …", the offer's place in the file only, which a catalog of many offers (or one
    # edited since) leaves the operator to count.
    with pytest.raises(CatalogError) as caught:
        load_catalog(write(tmp_path, {"offers": [DECIDER, {**CHAT, "price_in": -1}, {"id": 7}]}))
    message = str(caught.value)
    assert "offer 'acme/chat' at offers.1.price_in: Input should be greater than or equal to 0" in message
    assert "; offers.2.provider: " in message  # an offer without a string id is named by its place alone


@pytest.mark.parametrize("fields, problem", [
    ({"price_cachd_in": 0.05}, "unknown field 'price_cachd_in': did you mean 'price_cached_in'?"),
    ({"max_concurency": 1}, "unknown field 'max_concurency': did you mean 'max_concurrency'?"),
    ({"suports_json_mode": True}, "unknown field 'suports_json_mode': did you mean 'supports_json_mode'?"),
    ({"Price-Cache-Write": 0.6}, "unknown field 'Price-Cache-Write': did you mean 'price_cache_write'?"),
    ({"contxt": 128000}, "unknown field 'contxt': did you mean 'context'?"),
    ({"reasoning_efort": "low"}, "unknown field 'reasoning_efort': did you mean 'reasoning_effort'?"),
    ({"base_ur": "https://api.openai.com/v1"}, "unknown field 'base_ur': did you mean 'base_url'?"),
])
def test_a_misspelt_field_is_refused(tmp_path: Path, fields: dict[str, Any], problem: str) -> None:
    # Before, a misspelt number or flag loaded as a policy observation nothing reads: a misspelt cache price left
    # the default (10 % of price_in), a misspelt max_concurrency no limit, a misspelt context no context check.
    with pytest.raises(CatalogError) as caught:
        load_catalog(write(tmp_path, {"offers": [{**CHAT, **fields}]}))
    assert f"offer 'acme/chat' at offers.0: {problem}" in str(caught.value)


def test_observations_near_a_field_name_still_load(tmp_path: Path) -> None:
    fields = {"latency_p50_ms": 900, "success_rate_7d": 0.99, "tier2": True, "context_window_note": None}
    catalog = load_catalog(write(tmp_path, {"offers": [{**CHAT, **fields}]}))
    assert fields.items() - {"context_window_note": None}.items() <= catalog.offers[0].observations.items()


@pytest.mark.parametrize("prices, problem", [
    ({"price_in": 1.0, "price_out": None}, "price_in without price_out: every call's cost would be unknown"),
    ({"price_in": None, "price_out": 2.0}, "price_out without price_in"),
    ({"price_in": None, "price_out": None, "price_cached_in": 0.1},
     "price_cached_in without price_in and price_out"),
])
def test_a_price_without_its_pair_is_refused(tmp_path: Path, prices: dict[str, Any], problem: str) -> None:
    # Before, it loaded, and every call of the offer had an unknown cost (cost_usd null, cost_known false).
    with pytest.raises(CatalogError, match=problem):
        load_catalog(write(tmp_path, {"offers": [{**CHAT, **prices}]}))
    builtin = {**BUILTIN, "price_out": None}  # the plain reading of built-in offers refuses it as the models do
    with pytest.raises(CatalogError, match="price_in without price_out"):
        load_catalog(write(tmp_path, {"offers": [builtin]}))


@pytest.mark.parametrize("envelope", [["bogus"], ["field", "no_such_observation"], ["and", ["meets_req"], 3]])
def test_a_policy_envelope_the_router_refuses_is_refused_at_load(tmp_path: Path, envelope: Any) -> None:
    """The envelope is admitted as the router admits it (a Pred over the catalog's fields): one it refuses used to
    load, pass ``compactor doctor`` and the layer's build, then fail the router of every request (500, and
    GET /v1/healthz 503)."""
    from compactor.catalog import load_deployed_catalog

    path = write(tmp_path, {"offers": [DECIDER, CHAT], "policy_envelope": envelope})
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert path in str(caught.value) and "policy_envelope" in str(caught.value)
    with pytest.raises(CatalogError):
        load_deployed_catalog(path)
    valid = ["and", ["not", ["provider_eq", "evil"]], ["not", ["is", "no_log"]]]  # an observation an offer carries
    assert load_catalog(write(tmp_path, {"offers": [DECIDER, CHAT], "policy_envelope": valid},
                              name="valid.json")).policy_envelope == valid
