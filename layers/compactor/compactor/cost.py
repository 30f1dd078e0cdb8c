"""What a model call costs (see docs/behaviour.md, "Cost rules"): the one home of the price formula,
the cached-input discount, billed failed attempts and rounding.

Prices are USD per million tokens. A cost the provider reports (a finite number in [0, 1000]) wins over the
computed one. Input tokens read from a provider's prompt cache cost the offer's ``price_cached_in``, input
tokens written to it its ``price_cache_write``; an offer whose catalog entry states neither is priced at
:data:`CACHED_INPUT_PRICE_FACTOR` and :data:`CACHE_WRITE_PRICE_FACTOR` of ``price_in`` (what Anthropic and
Bedrock bill Claude for a five-minute cache entry; OpenAI, Gemini and Amazon Nova price their caches
otherwise, docs/providers.md "Prompt caching"). A failed
attempt the provider billed is added to the cost of the call that finally answered. Rounding rule:
costs are computed at full precision and rounded once where they are recorded, to
:data:`NODE_DECIMALS` in flow-node traces, decision calls and flow totals (decisions cost fractions of
a micro-dollar) and to :data:`RESPONSE_DECIMALS` in a chat call and in a response's ``cost_usd``.
"""

from __future__ import annotations

from typing import Any, Final

from compactor.jsonutil import is_finite_number

CACHED_INPUT_PRICE_FACTOR: Final = 0.1
CACHE_WRITE_PRICE_FACTOR: Final = 1.25
TOKENS_PER_PRICE_UNIT: Final = 1_000_000
NODE_DECIMALS: Final = 12
RESPONSE_DECIMALS: Final = 6
# A reported cost beyond this is junk: unknown, never a huge number (docs/reliability.md).
MAX_SANE_COST_USD: Final = 1_000.0


def reported(value: Any) -> float | None:
    """A provider-reported cost, when it is usable (finite, in [0, MAX_SANE_COST_USD]), else None."""
    return float(value) if is_finite_number(value) and 0 <= value <= MAX_SANE_COST_USD else None


def priced(price_in: float, price_out: float, tokens_in: int, tokens_out: int, tokens_cached: int | None,
           tokens_cache_written: int | None = None, *, price_cached_in: float | None = None,
           price_cache_write: float | None = None) -> float:
    """Prices x tokens, cache reads and cache writes (both part of ``tokens_in``) at the offer's own cache
    prices when the catalog states them, else at the default discount and surcharge of ``price_in``; never
    negative, not rounded."""
    cached = min(tokens_cached or 0, tokens_in)
    written = min(tokens_cache_written or 0, tokens_in - cached)
    read_price = price_in * CACHED_INPUT_PRICE_FACTOR if price_cached_in is None else price_cached_in
    write_price = price_in * CACHE_WRITE_PRICE_FACTOR if price_cache_write is None else price_cache_write
    cost = ((tokens_in - cached - written) / TOKENS_PER_PRICE_UNIT * price_in
            + cached / TOKENS_PER_PRICE_UNIT * read_price
            + written / TOKENS_PER_PRICE_UNIT * write_price
            + tokens_out / TOKENS_PER_PRICE_UNIT * price_out)
    return max(cost, 0.0)


def default_cache_prices_apply(transport: str, model: str) -> bool:
    """Whether the default cache factors are the offer's own prices: Claude's five-minute cache, on Anthropic's API
    or on Bedrock (a model id naming ``anthropic.claude``). OpenAI bills cached input at a tenth, a quarter or a half
    of its input price by model, Amazon Nova reads at a quarter: for another offer a default is a guess, which
    ``compactor doctor`` points out (docs/billing.md "Prices the catalog does not state")."""
    return transport == "anthropic" or (transport == "bedrock" and "anthropic.claude" in model)


def default_cache_prices(tokens_in: int, tokens_cached: int | None, tokens_cache_written: int | None, *,
                         price_cached_in: float | None = None, price_cache_write: float | None = None
                         ) -> tuple[str, ...]:
    """The cache prices :func:`priced` took from the default factors for these tokens (the offer states none, and
    tokens were read from / written to a cache): ``price_cached_in``, ``price_cache_write``, both or none. The
    traces name them (docs/billing.md "Prices the catalog does not state")."""
    cached = min(tokens_cached or 0, tokens_in)
    written = min(tokens_cache_written or 0, tokens_in - cached)
    return (("price_cached_in",) if cached > 0 and price_cached_in is None else ()) \
        + (("price_cache_write",) if written > 0 and price_cache_write is None else ())


def with_failed_attempts(cost: float | None, failed: float | None, decimals: int, *, failed_known: bool
                         ) -> float | None:
    """The answering call's cost plus what earlier, failed attempts were billed (a billed response keeps
    its cost even when it was rejected); ``None`` when the answering call's cost is unknown, or when
    ``failed`` may not be all the failed attempts cost (``failed_known`` false: a timeout or an answer refused
    without a reported cost may have been billed): never a partial sum (docs/behaviour.md "Cost rules")."""
    if cost is None or not failed_known:
        return None
    if not failed:
        return cost
    return round(cost + failed, decimals)
