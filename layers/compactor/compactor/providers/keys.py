"""API keys of offers: an environment variable (``api_key_env``, local use) or a stored secret
(``api_key_secret``, a name or ARN read at run time by a pluggable resolver, see docs/providers.md).

The core reads no secret store itself: an adapter (``compactor_aws.providers`` for Secrets Manager)
installs the resolver with :func:`set_secret_resolver`.

A key that cannot be had fails the call with ``auth_error`` in generic words ("provider X is not configured
...; contact the operator"): the failure reaches the caller (``x_router``, a flow's error), who may not learn the
operator's variable or secret names. Those are the error's ``detail``: logged here, kept in the routing trace the
operator's tools read (``compactor.provider_failures``) and printed by ``compactor doctor``; neither ever holds
the value (docs/providers.md "Keys at run time").
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from compactor.providers.base import AUTH_ERROR, Offer, ProviderError

SecretResolver = Callable[[str], str]
CachedSecret = Callable[[str], "str | None"]

_secret_resolver: SecretResolver | None = None
_cached_secret: CachedSecret | None = None

logger = logging.getLogger(__name__)


def set_secret_resolver(resolver: SecretResolver | None, cached: CachedSecret | None = None) -> None:
    """Install the function that returns a secret's value from its name or ARN (None removes it), and the one
    that returns it only when it can without I/O (a value it keeps; None otherwise): :func:`resolve_key` then
    takes a kept key on the event loop instead of a worker thread."""
    global _secret_resolver, _cached_secret
    _secret_resolver, _cached_secret = resolver, cached


def _checked(key: str, where: str) -> str:
    key = key.strip()
    if not key:
        raise ProviderError(AUTH_ERROR, f"{where} is empty", sent=False)
    if not key.isascii() or not key.isprintable():
        raise ProviderError(AUTH_ERROR, f"{where} holds an invalid value", sent=False)
    return key


def not_configured(offer: Offer, failure: ProviderError) -> ProviderError:
    """The caller's ``auth_error`` for ``failure`` to have ``offer``'s key: generic words, the operator's
    (``failure.message``, naming the variable or secret) as its ``detail``, which is logged here."""
    detail = failure.detail or failure.message
    logger.warning("offer %s: %s", offer.id, detail)
    return ProviderError(AUTH_ERROR, f"provider {offer.provider} is not configured here (no usable API key); "
                         "contact the operator", http_status=failure.http_status, sent=False, detail=detail)


def api_key(offer: Offer) -> str | None:
    """The offer's key, or None when it needs none; a missing or unreadable key is ``auth_error``
    (:func:`not_configured`).

    A set ``api_key_env`` variable wins, so one catalog serves local runs (variable) and the deployed
    function (secret)."""
    try:
        return _named_key(offer)
    except ProviderError as exc:
        raise not_configured(offer, exc) from None


def _named_key(offer: Offer) -> str | None:
    """:func:`api_key`, its failures naming the variable or the secret."""
    if offer.api_key_env and os.environ.get(offer.api_key_env, "").strip():
        return _checked(os.environ[offer.api_key_env], f"API key variable {offer.api_key_env}")
    if offer.api_key_secret:
        try:
            return _secret_key(offer.api_key_secret)
        except ProviderError as exc:
            if not offer.api_key_env:
                raise
            # Both given and the variable unset: on a laptop the variable is the fix, so it is named first
            # (the secret alone sent a local run to Secrets Manager's permissions).
            raise ProviderError(exc.kind, f"API key variable {offer.api_key_env} is not set and {exc.message}",
                                http_status=exc.http_status, sent=False) from None
    if offer.api_key_env:
        raise ProviderError(AUTH_ERROR, f"API key variable {offer.api_key_env} is not set", sent=False)
    return None


def shown_secret(secret: str) -> str:
    """How a failure names the secret ``secret``: a Secrets Manager ARN by the secret's name alone. The operator
    reads it (logs, ``compactor doctor``, the CLI report): an ARN's account id and region add nothing there
    (docs/providers.md "Keys at run time")."""
    if secret.startswith("arn:") and ":secret:" in secret:
        return secret.partition(":secret:")[2]
    return secret


def _secret_key(secret: str) -> str:
    """The key held by the stored secret ``secret``; ``auth_error`` naming the secret when it cannot be had."""
    where = f"API key secret {shown_secret(secret)}"
    if _secret_resolver is None:
        raise ProviderError(AUTH_ERROR, f"{where} cannot be read: no secret store is configured here", sent=False)
    try:
        value = _secret_resolver(secret)
    except ProviderError as exc:
        exc.sent = False  # no key, no call: nothing reached the provider
        raise
    except Exception as exc:  # the store's own errors may quote request details: name the type only
        raise ProviderError(AUTH_ERROR, f"{where} cannot be read ({type(exc).__name__})", sent=False) from None
    return _checked(value, where)


async def resolve_key(offer: Offer) -> str | None:
    """:func:`api_key` for transports: a secret is read in a worker thread, never on the event loop
    (the first read of a container, and one per TTL, is a network call); a key the store keeps is taken
    at once (every call of a warm container: a thread hop a call cost the loop about 60 us)."""
    if offer.api_key_secret and not (offer.api_key_env and os.environ.get(offer.api_key_env, "").strip()):
        cached = _cached_secret
        kept = cached(offer.api_key_secret) if cached is not None else None
        if kept is not None:
            try:
                return _checked(kept, f"API key secret {shown_secret(offer.api_key_secret)}")
            except ProviderError as exc:
                raise not_configured(offer, exc) from None
        return await asyncio.to_thread(api_key, offer)
    return api_key(offer)
