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
