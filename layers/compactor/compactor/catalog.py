"""The operator's catalog of offers (docs/behaviour.md#catalog-and-transports): loading, validation and the per-container cache.

The catalog comes from ``load_catalog(path)``, else the file named by ``COMPACTOR_CATALOG``, else the
bundled ``presets/catalog.json`` (built-in offline offers only). Every boolean or number an offer
carries besides its identity, wiring and prices (``supports_json_mode``, ``context``, ``no_log``,
``tier``, ``latency_ms``, any extra numeric or boolean key …) becomes a policy observation field.

The module's annotations are evaluated where they stand (no ``from __future__ import annotations``): pydantic
would otherwise evaluate the 32 field annotations of the two models from strings when it builds them, 0.45 ms
of every cold start (docs/performance.md#the-workers-cold-start-sixth-round-issue-11).
"""

import os
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from compactor.jsonutil import is_finite_number
from compactor.jsonutil import StrictJSONError, strict_loads
from compactor.providers.base import Offer
from compactor.providers.registry import TRANSPORTS
from compactor.records import record

CATALOG_ENV = "COMPACTOR_CATALOG"
# Offer keys that are wiring, not observations.
_WIRING_KEYS = frozenset({"id", "provider", "family", "model", "protocol", "transport", "base_url",
                          "api_key_env", "api_key_secret", "region", "max_concurrency", "price_in",
                          "price_out"})


class CatalogError(ValueError):
    """An unreadable or invalid catalog; the message names the file and the problem."""




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

    @field_validator("base_url")
    @classmethod
    def _strip_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _check_wiring(self) -> "OfferSpec":
        for key, value in (self.model_extra or {}).items():
            if not (value is None or isinstance(value, bool) or is_finite_number(value)):
                raise ValueError(f"unknown field {key!r}: extra offer fields must be booleans, finite numbers or null")
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


@record(frozen=True)
class Catalog:
    """The loaded catalog: offers in file order and the policy envelope."""

    offers: tuple[Offer, ...]
    policy_envelope: list[Any] | None = None

    def offer(self, offer_id: str) -> Offer | None:
        """The offer with this id, if any."""
        return next((offer for offer in self.offers if offer.id == offer_id), None)

    def for_protocol(self, protocol: str) -> tuple[Offer, ...]:
        """The offers of one protocol (``chat`` or ``decisions``), in file order."""
        return tuple(offer for offer in self.offers if offer.protocol == protocol)


def bundled_catalog_path() -> Path:
    """The catalog shipped with the package (built-in offline offers), beside this module: the package is
    installed as files (as ``Path`` needs), and ``importlib.resources`` would load its readers on the first
    request (docs/performance.md#request-models-regexes-and-docstrings-issue-11)."""
    return Path(__file__).parent / "presets" / "catalog.json"


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")


def parse_catalog(data: Any, source: str = "<catalog>") -> Catalog:
    """A :class:`Catalog` from already-parsed JSON; ``CatalogError`` names ``source`` and the problem."""
    try:
        spec = CatalogSpec.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(f"catalog {source}: {_describe(exc)}") from None
    return Catalog(tuple(offer.to_offer() for offer in spec.offers), spec.policy_envelope)


def load_catalog(path: str | None = None) -> Catalog:
    """Load ``path``, else ``$COMPACTOR_CATALOG``, else the bundled catalog."""
    source = Path(path or os.environ.get(CATALOG_ENV) or bundled_catalog_path())
    try:
        text = source.read_bytes()
    except OSError as exc:
        raise CatalogError(f"catalog {source}: cannot read ({exc.strerror or exc})") from None
    try:
        data = strict_loads(text)
    except StrictJSONError as exc:
        raise CatalogError(f"catalog {source}: invalid JSON ({exc})") from None
    return parse_catalog(data, str(source))


@cache
def get_catalog() -> Catalog:
    """The container's catalog, loaded once (see :func:`load_catalog`)."""
    return load_catalog()


def reset_catalog_cache() -> None:
    """Forget the cached catalog (tests, or after changing ``COMPACTOR_CATALOG``)."""
    get_catalog.cache_clear()
