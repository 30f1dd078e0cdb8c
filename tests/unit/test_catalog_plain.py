"""``compactor.catalog._plain_catalog`` reads a catalog of built-in offers without the pydantic models
(docs/performance.md#the-catalog-without-its-models-issue-11-seventh-round): whenever it answers, its catalog is
the models' to the value and type; it answers for the bundled catalog; what it leaves goes to the models."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor import catalog
from compactor.catalog import CatalogError, _plain_catalog, _validated_catalog
from compactor.jsonutil import strict_loads

NAMES = ["", "x", "a" * 200, "a" * 201, "é" * 200, "é" * 201, "b/\ud800", None, 1, ["x"]]
PRICES = [0, 1, -1, 0.5, -0.0, 2**53 + 1, 10**400, float("inf"), float("nan"), True, None, "1"]
FLAGS = [True, False, None, 0, 1, "true"]
VALUES: dict[str, list[Any]] = {
    **{key: NAMES for key in catalog._PLAIN_NAMES},
    "protocol": ["chat", "decisions", "other", None, ["chat"], {}], "transport": ["builtin", "openai", "bedrock", None],
    **{key: [None, "https://example.com", "KEY_ENV", "us-east-1", 1, 0] for key in catalog._PLAIN_UNSET},
    "price_in": PRICES, "price_out": PRICES, **{key: FLAGS for key in catalog._PLAIN_FLAGS},
    "context": [0, 5, -1, True, 1.0, None, 2**70, "5"],
    "latency_ms": [1.5, None], "tier": [1, "gold", None], "cache_min_tokens": [1024, None],
    "reasoning_effort": ["low", None], "reasoning_budget_tokens": [2048, None],
    "extra_flag": [True, 1, 0.5, None, "x"], "credits": [0.0, None],
}


@st.composite
def offers(draw: Any) -> dict[str, Any]:
    """An offer near the plain reading's edge: a valid built-in offer with a few keys dropped, added or given
    other values, each from values of that key's kind."""
    offer: dict[str, Any] = {"id": draw(st.sampled_from(["b/one", "b/two", "b/three"])), "provider": "builtin",
                             "family": "f", "model": "m", "protocol": draw(st.sampled_from(["chat", "decisions"])),
                             "transport": "builtin", "base_url": None, "api_key_env": None, "price_in": 0,
                             "price_out": 0.0, "context": 10_000_000, "supports_json_mode": True, "no_log": True}
    for key in draw(st.lists(st.sampled_from(sorted(VALUES)), max_size=3)):
        if draw(st.integers(0, 4)) == 0:
            offer.pop(key, None)
        else:
            offer[key] = draw(st.sampled_from(VALUES[key]))
    return offer


@st.composite
def catalogs(draw: Any) -> Any:
    data: Any = {"offers": draw(st.lists(offers(), max_size=3))}
    if draw(st.booleans()):
        data["policy_envelope"] = draw(st.sampled_from([None, [], ["true"], "x"]))
    return draw(st.sampled_from([data] * 12 + [{"offers": "x"}, {}, [], {**data, "other": 1}]))


def validated(data: Any) -> Any:
    try:
        return repr(_validated_catalog(data, "<test>"))
    except CatalogError as exc:
        return exc


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(catalogs())
def test_the_plain_reading_is_the_models_reading(data: Any) -> None:
    plain = _plain_catalog(data)
    if plain is not None:
        assert repr(plain) == validated(data)  # the same offers, values and types (0 read as 0.0 ...)
        assert [type(value) for offer in plain.offers for value in offer.observations.values()] == [
            type(value) for offer in _validated_catalog(data, "<test>").offers for value in offer.observations.values()]


def _outcome(data: Any) -> Any:
    try:
        return repr(catalog.parse_catalog(data, "<test>"))
    except CatalogError as exc:
        return f"CatalogError: {exc}"


@pytest.mark.parametrize("key", sorted(VALUES))
def test_each_value_at_the_edge_is_read_as_the_models_read_it(key: str) -> None:
    """Every value of every key, one at a time, in an otherwise plain offer: ``parse_catalog`` (plain reading or
    models) answers what the models answer, the same catalog or the same error (a random draw reaches the plain
    reading with few of these)."""
    base = {"id": "b/one", "provider": "builtin", "family": "f", "model": "m", "protocol": "chat",
            "transport": "builtin", "price_in": 0.5, "price_out": 2, "context": 4096, "no_log": True}
    for value in [*VALUES[key], -1, -0.0, -1.5, 2**53 - 1, 2**53, 2**53 + 1, 10**400, True, False,
                  float("nan"), float("inf"), "\ud800", [], {}]:
        data = {"offers": [{**base, key: value}]}
        expected = validated(data)
        expected = expected if isinstance(expected, str) else f"CatalogError: {expected}"
        assert _outcome(data) == expected, (key, value)


def test_the_bundled_catalog_is_read_plainly() -> None:
    data = strict_loads(catalog.bundled_catalog_path().read_bytes())
    assert _plain_catalog(data) is not None
    assert repr(catalog.parse_catalog(data)) == repr(_validated_catalog(data, "<bundled>"))
    probe = ("import sys; from compactor.catalog import get_catalog; get_catalog(); "
             "print('compactor.catalog_models' in sys.modules, 'pydantic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    # The models are not built for it, nor pydantic imported (docs/performance.md#the-catalog-without-pydantic)
    assert done.stdout.strip() == "False False"


def test_the_plain_reading_knows_the_models_fields() -> None:
    """The fields it reads are the models' and its observations in their order (that of ``model_dump``)."""
    fields = list(catalog.OfferSpec.model_fields)
    assert catalog._PLAIN_KEYS <= set(fields)
    assert list(catalog._PLAIN_OBSERVED) == [name for name in fields if name in catalog._PLAIN_OBSERVED]
    assert set(catalog._PLAIN_OBSERVED).isdisjoint(catalog._WIRING_KEYS)


def test_what_the_plain_reading_leaves_is_validated() -> None:
    data = strict_loads(catalog.bundled_catalog_path().read_bytes())
    data["offers"].append(dict(data["offers"][0]))
    with pytest.raises(CatalogError, match="duplicate offer id"):
        catalog.parse_catalog(data)
