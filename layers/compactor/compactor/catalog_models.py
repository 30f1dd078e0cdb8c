"""The catalog file's pydantic models (docs/behaviour.md#catalog-and-transports), built when a catalog that
``compactor.catalog``'s plain reading does not take is first validated
(docs/performance.md#the-catalog-without-its-models-issue-11-seventh-round).

The module's annotations are evaluated where they stand (no ``from __future__ import annotations``): pydantic
would otherwise evaluate the 32 field annotations of the two models from strings when it builds them, 0.45 ms
(docs/performance.md#the-workers-cold-start-sixth-round-issue-11).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from compactor.catalog import _WIRING_KEYS
from compactor.jsonutil import is_finite_number
from compactor.providers import reasoning
from compactor.providers.base import Offer
from compactor.providers.registry import TRANSPORTS


_PRICES = ("price_in", "price_out", "price_cached_in", "price_cache_write")
# The closeness (difflib's ratio) from which an extra key is taken for a misspelt field: "price_cachd_in",
# "max_concurency", "suports_json_mode" are refused; observations such as "latency_p50_ms" (0.83 to "latency_ms"),
# "context_window" or a field's name made longer ("tier2") are not.
_TYPO_RATIO = 0.88


def _meant(key: str) -> str | None:
    """The offer field ``key`` is a misspelling of (another case, ``-`` for ``_``, a letter or two off), or None."""
    from difflib import get_close_matches

    fields = OfferSpec.model_fields
    plain = key.lower().replace("-", "_").replace(" ", "_")
    if plain in fields:
        return plain
    if any(plain.startswith(name) for name in fields):  # a field's name made longer ("tier2", "success_rate_7d")
        return None
    close = get_close_matches(plain, fields, n=1, cutoff=_TYPO_RATIO)
    return close[0] if close else None


class OfferSpec(BaseModel):
    """One offer as written in the catalog file."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    id: str = Field(min_length=1, max_length=200)
    provider: str = Field(min_length=1, max_length=200)
    family: str = Field(min_length=1, max_length=200)
    model: str = Field(min_length=1, max_length=200)
    protocol: Literal["chat", "decisions"]
    transport: Literal[tuple(TRANSPORTS)]  # type: ignore[valid-type]  # the names of the one transport table
    base_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # A Secrets Manager name or ARN (the characters both allow).
    api_key_secret: str | None = Field(default=None, min_length=1, max_length=2048,
                                       pattern=r"^[A-Za-z0-9/_+=.@:\-]+$")
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$")
    max_concurrency: int | None = Field(default=None, ge=1, le=1024)
    price_in: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    price_out: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    price_cached_in: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    price_cache_write: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    supports_tools: bool | None = None
    supports_vision: bool | None = None
    supports_json_mode: bool | None = None
    supports_seed: bool | None = None
    no_log: bool | None = None
    has_tee: bool | None = None
    disabled: bool | None = None
    context: int | None = Field(default=None, ge=0)
    latency_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    tok_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    success_rate: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    credits: float | None = Field(default=None, allow_inf_nan=False)
    tier: str | int | None = None
    # Prompt-cache markers (docs/providers.md "Prompt caching"): on or off for this offer (default: the
    # transport's), and the fewest prompt tokens worth a marker (default 1024).
    prompt_cache: bool | None = None
    cache_min_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    # Reasoning models (docs/providers.md "Reasoning models"): the effort (OpenAI's, or Anthropic's for Claude's
    # adaptive thinking), and the output tokens kept for reasoning (alone, Claude's extended-thinking budget);
    # each only where the transport sends it, an effort only of the values its wire takes.
    reasoning_effort: Literal[reasoning.EFFORTS] | None = None  # type: ignore[valid-type]
    reasoning_budget_tokens: int | None = Field(default=None, ge=reasoning.MIN_BUDGET_TOKENS,
                                                le=reasoning.MAX_BUDGET_TOKENS)

    @field_validator("base_url")
    @classmethod
    def _strip_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _check_wiring(self) -> "OfferSpec":
        for key, value in (self.model_extra or {}).items():
            if (meant := _meant(key)) is not None:
                raise ValueError(f"unknown field {key!r}: did you mean {meant!r}? (any other key is a policy "
                                 "observation, which nothing else reads)")
            if not (value is None or isinstance(value, bool) or is_finite_number(value)):
                raise ValueError(f"unknown field {key!r}: extra offer fields must be booleans, finite numbers or null")
        stated = [name for name in _PRICES if getattr(self, name) is not None]
        if stated and not {"price_in", "price_out"} <= set(stated):
            missing = " and ".join(name for name in ("price_in", "price_out") if name not in stated)
            raise ValueError(f"{', '.join(stated)} without {missing}: every call's cost would be unknown; state both "
                             "price_in and price_out (USD per million tokens), or no price")
        kind = TRANSPORTS[self.transport]
        if self.protocol not in kind.protocols:
            raise ValueError(f"transport {self.transport!r} cannot serve protocol {self.protocol!r}")
        if kind.base_url == "required" and not self.base_url:
            raise ValueError(f"transport {self.transport!r} needs a base_url")
        if kind.base_url == "none" and (self.base_url or self.api_key_env or self.api_key_secret):
            raise ValueError(f"{self.transport} offers take no base_url, api_key_env or api_key_secret")
        if not kind.keys and (self.api_key_env or self.api_key_secret):
            raise ValueError(f"{self.transport} offers take no key: the function's IAM role signs the calls")
        if self.region and not kind.regional:
            regional = " or ".join(name for name, other in TRANSPORTS.items() if other.regional)
            raise ValueError(f"only {regional} offers take a region")
        refused = reasoning.refusal(self.transport, self.reasoning_effort, self.reasoning_budget_tokens, self.model,
                                    self.base_url)
        if refused is not None:
            raise ValueError(refused)
        room = reasoning.room_of(self.reasoning_effort, self.reasoning_budget_tokens)
        if room and self.context and self.context <= room:
            raise ValueError(f"context {self.context} leaves nothing beside the {room} tokens kept for reasoning: "
                             "state the model's whole context")
        return self

    def to_offer(self) -> Offer:
        """The runtime :class:`Offer`: wiring and prices as fields, the rest as observations."""
        fields = self.model_dump(exclude_none=True)
        observations = {key: value for key, value in fields.items() if key not in _WIRING_KEYS}
        return Offer(
            id=self.id, provider=self.provider, family=self.family, model=self.model,
            protocol=self.protocol, transport=self.transport, base_url=self.base_url,
            api_key_env=self.api_key_env, api_key_secret=self.api_key_secret, region=self.region,
            max_concurrency=self.max_concurrency, price_in=self.price_in, price_out=self.price_out,
            price_cached_in=self.price_cached_in, price_cache_write=self.price_cache_write,
            reasoning_effort=self.reasoning_effort, reasoning_budget_tokens=self.reasoning_budget_tokens,
            observations=observations,
        )


class CatalogSpec(BaseModel):
    """The catalog file: offers and the operator's policy envelope (a Pred term or null)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    offers: list[OfferSpec]
    policy_envelope: list[Any] | None = None

    @model_validator(mode="after")
    def _unique_ids(self) -> "CatalogSpec":
        seen: set[str] = set()
        for offer in self.offers:
            if offer.id in seen:
                raise ValueError(f"duplicate offer id {offer.id!r}")
            seen.add(offer.id)
        return self
