"""Which :class:`~compactor.providers.base.Transport` serves an offer (its ``transport`` field)."""

from __future__ import annotations

from functools import cache

from compactor.providers.base import Offer, Transport
from compactor.providers.chat_decisions import ChatDecisionsTransport
from compactor.providers.native_decisions import DecisionsTransport
from compactor.providers.openai import OpenAITransport

_HTTP_TRANSPORTS: dict[str, Transport] = {
    "openai": OpenAITransport(),
    "decisions": DecisionsTransport(),
    "chat-decisions": ChatDecisionsTransport(),
}


@cache
def _builtin_transport() -> Transport:
    # Imported lazily: the built-in models are only loaded when an offer uses them.
    from compactor.offline.transport import BuiltinTransport

    return BuiltinTransport()


def transport_for(offer: Offer) -> Transport:
    """The shared, stateless transport for ``offer``; unknown names raise ``ValueError``."""
    if offer.transport == "builtin":
        return _builtin_transport()
    try:
        return _HTTP_TRANSPORTS[offer.transport]
    except KeyError:
        raise ValueError(f"offer {offer.id}: unknown transport {offer.transport!r}") from None
