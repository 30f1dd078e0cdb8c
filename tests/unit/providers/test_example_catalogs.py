"""The worked catalogs of docs/providers.md load, have a decider and a JSON summarizer, and say what
the guide says they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactor.catalog import load_catalog
from compactor_cli.doctor import role_problems

CATALOGS = Path(__file__).resolve().parents[3] / "docs" / "catalogs"


@pytest.mark.parametrize("name", ["openai.json", "bedrock.json", "local-openai-compatible.json"])
def test_example_catalog_loads_with_both_roles(name: str) -> None:
    catalog = load_catalog(str(CATALOGS / name))
    assert role_problems(catalog) == []
    assert all(offer.price_in is not None and offer.price_out is not None for offer in catalog.offers)


def test_examples_show_each_kind_of_wiring() -> None:
    openai = load_catalog(str(CATALOGS / "openai.json"))
    assert {o.transport for o in openai.offers} == {"openai", "chat-decisions"}
    assert all(o.api_key_env == "OPENAI_API_KEY" and o.api_key_secret for o in openai.offers)
    bedrock = load_catalog(str(CATALOGS / "bedrock.json"))
    assert {o.transport for o in bedrock.offers} == {"bedrock"}
    assert all(o.region and not (o.api_key_env or o.api_key_secret) for o in bedrock.offers)
    local = load_catalog(str(CATALOGS / "local-openai-compatible.json"))
    assert all(o.base_url.startswith("http://127.0.0.1") and o.max_concurrency == 1 for o in local.offers)
    assert all(o.price_in == 0 and o.price_out == 0 for o in local.offers)


def test_the_paid_examples_state_their_models_cache_prices() -> None:
    """docs/providers.md "Prompt caching": OpenAI and Amazon Nova do not price their caches at Claude's
    10 % / 125 % defaults, so the examples say what they do; the keys are prices, not observations."""
    prices = {offer.model: (offer.price_in, offer.price_cached_in, offer.price_cache_write)
              for name in ("openai.json", "bedrock.json") for offer in load_catalog(str(CATALOGS / name)).offers}
    assert prices == {"gpt-4.1-nano": (0.1, 0.025, 0.1), "gpt-4.1-mini": (0.4, 0.1, 0.4),
                      "us.amazon.nova-micro-v1:0": (0.035, 0.00875, 0.035),
                      "us.anthropic.claude-3-5-haiku-20241022-v1:0": (0.8, 0.08, 1.0)}
    for name in ("openai.json", "bedrock.json"):
        for offer in load_catalog(str(CATALOGS / name)).offers:
            assert not {"price_cached_in", "price_cache_write"} & offer.observations.keys()
