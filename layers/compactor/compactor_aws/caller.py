"""Who is calling: :mod:`compactor.caller`, where the derivation lives (docs/billing.md), under the name the
adapters, the routes and the CLI import."""

from compactor.caller import (
    ANONYMOUS,
    BEARER_PREFIX,
    LOCAL_ID_PREFIX,
    authorizer_response,
    caller_of,
    calling_as,
    local_key_id,
    presented_key,
)

__all__ = ["ANONYMOUS", "BEARER_PREFIX", "LOCAL_ID_PREFIX", "authorizer_response", "caller_of", "calling_as",
           "local_key_id", "presented_key"]
