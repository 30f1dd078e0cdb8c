"""Who is calling: the one place a caller's identity is derived (docs/billing.md). Pure Python, no AWS
imports, like :mod:`compactor.http_api`: it lives in the core so that ``functions/authorizer`` imports it
without :mod:`compactor_aws`, whose import plugs the provider adapters into the core (asyncio and
``compactor.providers``, which the authorizer never uses; docs/deploy.md#the-authorizer).

Deployed, API Gateway has checked the API key (from ``x-api-key``, or from ``Authorization: Bearer``
through the authorizer in ``functions/authorizer``) and puts its id in
``requestContext.identity.apiKeyId``; the authorizer's principal (a hash of the key) stands in when
that is absent. Locally (``compactor serve``), the same field carries :func:`local_key_id` of the
presented key. Headers are never trusted by the function itself: only the request context is.
Billing, the usage route and per-key state (restorable archives) all scope by :func:`caller_of`, and the
router's provider health by :data:`current_caller` (docs/reliability.md#isolation-one-callers-failures-are-that-callers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

ANONYMOUS = "anonymous"
"""The caller of an API that requires no key (``compactor serve`` without ``--api-key``)."""
BEARER_PREFIX = "bearer "
LOCAL_ID_PREFIX = "key-"

current_caller: ContextVar[str | None] = ContextVar("compactor_caller", default=None)
"""Whose request runs (:func:`caller_of`), set by the API handler around each event (:func:`calling_as`), and
around each S3 object's job, its windowed job's steps and windows, as the caller the job is billed to: the router
keeps one caller's failures to that caller's routing. None elsewhere (the CLI): one caller, the operator."""


@contextmanager
def calling_as(caller: str | None) -> Iterator[None]:
    """Run what is inside as ``caller``'s request (see :data:`current_caller`)."""
    token = current_caller.set(caller)
    try:
        yield
    finally:
        current_caller.reset(token)


def local_key_id(key: str) -> str:
    """A stable, non-reversible id of an API key value (never the value itself)."""
    return LOCAL_ID_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def presented_key(headers: Iterable[tuple[str, Any]]) -> str | None:
    """The key a request presents, in ``x-api-key`` or as the token of ``Authorization: Bearer <key>``; None
    without one. The same key in both (or twice) is that key. Two different keys raise
    :class:`~compactor.errors.AmbiguousApiKey`, the 400 both front doors answer (the authorizer's deny, ``compactor
    serve``): ``x-api-key`` used to win over the bearer token, and the last of two ``x-api-key`` headers over the
    first, without a word (docs/billing.md#bearer-keys)."""
    from compactor.errors import AmbiguousApiKey

    keys: list[str] = []
    for name, value in headers:
        if not isinstance(value, str):  # an event's header without a value (null) presents nothing
            continue
        lowered, key = name.lower(), None
        if lowered == "x-api-key":
            key = value or None
        elif lowered == "authorization" and value[:len(BEARER_PREFIX)].lower() == BEARER_PREFIX:
            key = value[len(BEARER_PREFIX):].strip() or None
        if key is not None and key not in keys:
            keys.append(key)
    if len(keys) > 1:
        raise AmbiguousApiKey
    return keys[0] if keys else None


def event_headers(event: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every header line of an API Gateway REST event: ``multiValueHeaders`` (each value of a header sent more than
    once) and ``headers`` (one value each: the last), as ``(name, value)`` pairs."""
    pairs: list[tuple[str, Any]] = []
    multi = event.get("multiValueHeaders")
    if isinstance(multi, Mapping):
        pairs += [(name, value) for name, values in multi.items() if isinstance(values, list) for value in values]
    single = event.get("headers")
    if isinstance(single, Mapping):
        pairs += list(single.items())
    return pairs


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def caller_of(event: Mapping[str, Any]) -> str:
    """The caller of an API Gateway REST proxy event: the API key id, the authorizer's principal, or
    :data:`ANONYMOUS`."""
    context = event.get("requestContext") if isinstance(event, Mapping) else None
    context = context if isinstance(context, Mapping) else {}
    identity = context.get("identity") if isinstance(context.get("identity"), Mapping) else {}
    authorizer = context.get("authorizer") if isinstance(context.get("authorizer"), Mapping) else {}
    return _text(identity.get("apiKeyId")) or _text(authorizer.get("principalId")) or ANONYMOUS


def authorizer_response(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Lambda authorizer's answer to an API Gateway REQUEST event: allow the API's methods with the
    presented key as ``usageIdentifierKey`` (API Gateway then checks it against the usage plan: 403
    when it is not a key of the plan), or None when no key is presented (the authorizer then fails:
    API Gateway's UNAUTHORIZED response, which the template makes the same 403 ``Forbidden``). Two different keys
    are denied: API Gateway answers its ACCESS_DENIED response, which the template makes the 400
    ``ambiguous_api_key`` ``compactor serve`` answers (docs/billing.md#bearer-keys)."""
    from compactor.errors import AmbiguousApiKey

    # arn:aws:execute-api:region:account:api-id/stage/METHOD/path -> every method of that stage
    arn, _, path = str(event.get("methodArn", "")).partition("/")
    stage = path.split("/", 1)[0]
    resource = f"{arn}/{stage}/*/*" if arn and stage else "*"
    headers = event_headers(event)
    try:
        key = presented_key(headers)
    except AmbiguousApiKey as refused:
        return {"principalId": str(refused.code), "policyDocument": _policy("Deny", resource),
                "context": {"refusal": str(refused.code)}}
    if not key:
        return None
    source = "x-api-key" if any(name.lower() == "x-api-key" and value for name, value in headers) else "bearer"
    return {
        "principalId": local_key_id(key),
        "policyDocument": _policy("Allow", resource),
        "usageIdentifierKey": key,
        "context": {"keySource": source},
    }


def _policy(effect: str, resource: str) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [{"Action": "execute-api:Invoke", "Effect": effect,
                                                   "Resource": resource}]}
