"""API keys read from Secrets Manager at run time (docs/providers.md), through Powertools Parameters'
cache so a warm container reads each secret once per TTL.
"""

from __future__ import annotations

import json
import os
import threading

from compactor.providers.base import AUTH_ERROR, ProviderError

SECRET_TTL_ENV = "COMPACTOR_SECRET_TTL_S"
DEFAULT_SECRET_TTL_S = 300

_secrets_lock = threading.Lock()


def secret_ttl_s() -> int:
    """How long a read secret is reused (``COMPACTOR_SECRET_TTL_S``, default 300 s)."""
    try:
        return max(0, int(os.environ.get(SECRET_TTL_ENV, DEFAULT_SECRET_TTL_S)))
    except ValueError:
        return DEFAULT_SECRET_TTL_S


def read_secret_key(name: str) -> str:
    """The API key stored in secret ``name`` (name or ARN), through Powertools Parameters' cache.

    The secret string is the key itself, or a JSON object whose ``api_key`` is the key."""
    from aws_lambda_powertools.utilities import parameters

    with _secrets_lock:  # one read per secret when calls start together
        ttl_s = secret_ttl_s()
        value = parameters.get_secret(name, max_age=ttl_s, force_fetch=ttl_s == 0)
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str):
        raise ProviderError(AUTH_ERROR, f"API key secret {name} is not a text secret")
    if value.lstrip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("api_key"), str):
            raise ProviderError(AUTH_ERROR, f'API key secret {name} is JSON without a text "api_key"')
        return parsed["api_key"]
    return value
