"""Lambda authorizer of ``CompactApi`` (docs/billing.md): the API key from ``x-api-key`` or
``Authorization: Bearer <key>`` becomes the request's usage-plan key (``ApiKeySourceType: AUTHORIZER``).

The key is checked by API Gateway against the usage plan after this function answers (403 when it is
not a key of the plan); without any key the authorizer fails, which the template's UNAUTHORIZED gateway
response answers with the same 403. No AWS call, and the key is never logged. It imports
``compactor.caller`` alone: importing ``compactor_aws`` would plug the provider adapters into the core,
loading asyncio and the provider modules into a function that calls no provider
(docs/deploy.md#the-authorizer).
"""

from __future__ import annotations

from typing import Any

from compactor.caller import authorizer_response


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    response = authorizer_response(event)
    if response is None:
        raise Exception("Unauthorized")  # noqa: TRY002 - the message API Gateway reads as "unauthorized"
    return response
