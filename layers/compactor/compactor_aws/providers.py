"""Plugs the AWS provider adapters into the core (docs/providers.md): the ``bedrock`` transport
(:mod:`compactor_aws.bedrock`) and API keys from Secrets Manager (:mod:`compactor_aws.secrets`).

Importing :mod:`compactor_aws` calls :func:`install`, so every Lambda function that calls providers and the
CLI get them (the authorizer imports ``compactor.caller`` alone: docs/deploy.md#the-authorizer); boto3 and
the adapters themselves load on first use.
"""

from __future__ import annotations

import sys

from compactor.providers.base import Transport
from compactor.providers.keys import set_secret_resolver
from compactor.providers.registry import register_transport


def _bedrock() -> Transport:
    from compactor_aws.bedrock import BedrockTransport

    return BedrockTransport()


def _read_secret(name: str) -> str:
    from compactor_aws.secrets import read_secret_key

    return read_secret_key(name)


def _cached_secret(name: str) -> str | None:
    secrets = sys.modules.get("compactor_aws.secrets")  # nothing is kept before the first read imports it
    return None if secrets is None else secrets.cached_secret_key(name)


def install() -> None:
    """Register the ``bedrock`` transport and the Secrets Manager key resolver."""
    register_transport("bedrock", _bedrock)
    set_secret_resolver(_read_secret, _cached_secret)
