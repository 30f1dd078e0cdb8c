"""API keys read from Secrets Manager at run time (docs/providers.md), at most once per secret and TTL per
container.

A key read within its TTL is kept here, parsed, and :func:`cached_secret_key` answers it without any I/O, so a
transport takes it on the event loop instead of sending every call's key lookup to a worker thread (about 60 us
of the loop's CPU and a thread hop a call; docs/performance.md, "The provider calls' own CPU"). Only a key not
read yet, or read longer ago than the TTL, goes to Secrets Manager, through Powertools Parameters, on a thread.
A secret read but holding no usable key (not text, JSON without ``"api_key"``) keeps its error for the TTL as
well: every call of a misconfigured offer fails at once instead of reading the store again. A failed read (no
such secret, no permission, the network) keeps nothing, and the next call reads again.

Powertools reads through a provider whose client comes from the container's session
(:func:`compactor_aws.aws_session.client`): its default provider builds a boto3 session of its own, with every
service's handlers, and a client whose connections load botocore's whole CA bundle. That took 62-127 ms of CPU at
a container's first read against 13-17 ms (three processes each, moto), before its connection's TLS.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from compactor.container import PerContainer
from compactor.providers.base import AUTH_ERROR, ProviderError
from compactor.providers.keys import shown_secret

SECRET_TTL_ENV = "COMPACTOR_SECRET_TTL_S"
DEFAULT_SECRET_TTL_S = 300

_secrets_lock = threading.Lock()
# secret name or ARN -> (its parsed key, or the error its value gave; time.monotonic() when it was read)
_keys: dict[str, tuple[str | ProviderError, float]] = {}


def secret_ttl_s() -> int:
    """How long a read secret is reused (``COMPACTOR_SECRET_TTL_S``, default 300 s)."""
    try:
        return max(0, int(os.environ.get(SECRET_TTL_ENV, DEFAULT_SECRET_TTL_S)))
    except ValueError:
        return DEFAULT_SECRET_TTL_S


def cached_secret_key(name: str) -> str | None:
    """The key of secret ``name`` when it was read less than the TTL ago, else None; never reads the store."""
    kept = _kept(name)
    return kept if isinstance(kept, str) else None


def _kept(name: str) -> str | ProviderError | None:
    kept = _keys.get(name)
    return kept[0] if kept is not None and time.monotonic() - kept[1] < secret_ttl_s() else None


def forget_keys() -> None:
    """Read every secret again on its next use, with a client built anew (a SnapStart restore, tests)."""
    _keys.clear()
    PROVIDER.reset()


def read_secret_key(name: str) -> str:
    """The API key stored in secret ``name`` (name or ARN): the one read less than the TTL ago, else read now.

    The secret string is the key itself, or a JSON object whose ``api_key`` is the key."""
    with _secrets_lock:  # one read per secret when calls start together
        kept = _kept(name)
        if kept is None:
            read_at = time.monotonic()
            value = _fetch(name, secret_ttl_s())  # a failed read raises here and keeps nothing
            try:
                kept = _parsed_key(name, value)
            except ProviderError as exc:
                kept = exc
            _keys[name] = (kept, read_at)
    if isinstance(kept, ProviderError):
        raise ProviderError(kept.kind, kept.message)
    return kept


def _provider() -> Any:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    from compactor_aws import aws_session

    return SecretsProvider(boto3_client=aws_session.client("secretsmanager"))


PROVIDER: PerContainer[Any] = PerContainer(_provider)
"""Powertools' Secrets Manager provider on the container's session (module docstring)."""


def _fetch(name: str, ttl_s: int) -> object:
    """The secret's value; a read that failed is ``auth_error`` naming Secrets Manager's error code (or botocore's
    error type), never its message. Powertools wraps every failure in ``GetParameterError`` (raised while handling
    the original, its ``__context__``): that name was all the operator read, whether the role lacked the grant, the
    secret did not exist or its KMS key could not be used (docs/providers.md "Keys at run time")."""
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
    from botocore.exceptions import ClientError

    try:  # this module's TTL decides when to read again; Powertools' cache would answer an older read
        return PROVIDER.get().get(name, max_age=ttl_s, force_fetch=True)
    except GetParameterError as exc:
        cause = exc.__context__
        if isinstance(cause, ClientError):
            reason = str(cause.response.get("Error", {}).get("Code") or type(cause).__name__)
        else:
            reason = type(cause if cause is not None else exc).__name__
        raise ProviderError(AUTH_ERROR, f"API key secret {shown_secret(name)} cannot be read ({reason})") from None


def _parsed_key(name: str, value: object) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str):
        raise ProviderError(AUTH_ERROR, f"API key secret {shown_secret(name)} is not a text secret")
    if value.lstrip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("api_key"), str):
            raise ProviderError(AUTH_ERROR, f'API key secret {shown_secret(name)} is JSON without a text "api_key"')
        return parsed["api_key"]
    return value
