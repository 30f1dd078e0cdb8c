"""transport_for picks the shared transport for an offer."""

from __future__ import annotations

import dataclasses

import pytest

from compactor.providers.base import Offer
from compactor.providers.chat_decisions import ChatDecisionsTransport
from compactor.providers.native_decisions import DecisionsTransport
from compactor.providers.openai import OpenAITransport
from compactor.providers.registry import transport_for

OFFER = Offer(id="o", provider="p", family="f", model="m", protocol="chat", transport="openai",
              base_url="http://127.0.0.1:1/v1")


@pytest.mark.parametrize(
    ("name", "kind"),
    [("openai", OpenAITransport), ("decisions", DecisionsTransport), ("chat-decisions", ChatDecisionsTransport)],
)
def test_http_transports_are_singletons(name: str, kind: type) -> None:
    offer = dataclasses.replace(OFFER, transport=name)
    assert isinstance(transport_for(offer), kind)
    assert transport_for(offer) is transport_for(dataclasses.replace(offer, id="other"))


def test_builtin_transport_is_loaded_lazily() -> None:
    pytest.importorskip("compactor.offline.transport")
    offer = dataclasses.replace(OFFER, transport="builtin", base_url=None)
    assert transport_for(offer) is transport_for(offer)


def test_unknown_transport() -> None:
    with pytest.raises(ValueError, match="carrier-pigeon"):
        transport_for(dataclasses.replace(OFFER, transport="carrier-pigeon"))
