"""The operator's catalog of offers (docs/behaviour.md#catalog-and-transports): loading, validation and the per-container cache.

The catalog comes from ``load_catalog(path)``, else the file named by ``COMPACTOR_CATALOG``, else the
bundled ``presets/catalog.json`` (built-in offline offers only). Every boolean or number an offer
carries besides its identity, wiring and prices (``supports_json_mode``, ``context``, ``no_log``,
``tier``, ``latency_ms``, any extra numeric or boolean key …) becomes a policy observation field.

A catalog is validated by the pydantic models of ``compactor.catalog_models`` (``OfferSpec``, ``CatalogSpec``,
also importable from here), built on first use: a catalog of built-in offers with the plainest values (the
bundled one) is read by :func:`_plain_catalog`, which checks what the models would check of it and builds the
same offers, without building the models (docs/performance.md#the-catalog-without-its-models-issue-11-seventh-round).
"""

import math
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from compactor.errors import describe_validation
from compactor.jsonutil import StrictJSONError, strict_loads
from compactor.providers.base import Offer
from compactor.providers.registry import BUILTIN, TRANSPORTS
from compactor.records import record

CATALOG_ENV = "COMPACTOR_CATALOG"
# Offer keys that are wiring, not observations.
_WIRING_KEYS = frozenset({"id", "provider", "family", "model", "protocol", "transport", "base_url",
                          "api_key_env", "api_key_secret", "region", "max_concurrency", "price_in",
                          "price_out", "price_cached_in", "price_cache_write", "reasoning_effort",
                          "reasoning_budget_tokens"})


class CatalogError(ValueError):
    """An unreadable or invalid catalog; the message names the file and the problem."""


def __getattr__(name: str) -> Any:
    """``OfferSpec`` and ``CatalogSpec``, from ``compactor.catalog_models`` (built when first asked for)."""
    if name in ("OfferSpec", "CatalogSpec"):
        from compactor import catalog_models

        return getattr(catalog_models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def parse_catalog(data: Any, source: str = "<catalog>") -> Catalog:
    """A :class:`Catalog` from already-parsed JSON; ``CatalogError`` names ``source`` and the problem."""
    plain = _plain_catalog(data)
    return plain if plain is not None else _validated_catalog(data, source)


def _validated_catalog(data: Any, source: str) -> Catalog:
    """:func:`parse_catalog` by the pydantic models."""
    from pydantic import ValidationError

    from compactor.catalog_models import CatalogSpec

    try:
        spec = CatalogSpec.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(f"catalog {source}: {describe_validation(exc, located=_offer_named(data))}") from None
    offers = tuple(offer.to_offer() for offer in spec.offers)
    if spec.policy_envelope is not None:
        # Admitted as the router admits it (a Pred over the offers' fields): one it refuses loaded, passed
        # ``compactor doctor`` and the layer's build, then failed the router of every request (500; healthz 503).
        from compactor.policy import PolicyAdmissionError, admit_pred
        from compactor.policy.fields import fields_observed_in

        try:
            admit_pred(spec.policy_envelope, fields=fields_observed_in(offers))
        except PolicyAdmissionError as exc:
            raise CatalogError(f"catalog {source}: policy_envelope: {exc}") from None
    return Catalog(offers, spec.policy_envelope)


def _offer_named(data: Any) -> Callable[[tuple[Any, ...]], str]:
    """A problem's location in ``data``, naming the offer it is in by its id where it has one:
    ``offer 'openai/gpt-5' at offers.2.price_in``."""
    def located(loc: tuple[Any, ...]) -> str:
        where = ".".join(str(part) for part in loc)
        if len(loc) >= 2 and loc[0] == "offers" and type(loc[1]) is int:
            offer = data["offers"][loc[1]]
            if type(offer) is dict and type(offer.get("id")) is str:
                return f"offer {offer['id']!r} at {where}"
        return where

    return located


_PLAIN_NAMES = ("id", "provider", "family", "model")
_PLAIN_FLAGS = ("supports_tools", "supports_vision", "supports_json_mode", "supports_seed", "no_log", "has_tee",
                "disabled", "prompt_cache")
_PLAIN_OBSERVED = ("supports_tools", "supports_vision", "supports_json_mode", "supports_seed", "no_log", "has_tee",
                   "disabled", "context", "prompt_cache")
"""The observation fields :func:`_plain_catalog` reads, in ``OfferSpec``'s order (that of its ``model_dump``)."""
_PLAIN_UNSET = ("base_url", "api_key_env", "api_key_secret", "region", "max_concurrency")
_PLAIN_KEYS = frozenset((*_PLAIN_NAMES, "protocol", "transport", *_PLAIN_UNSET, "price_in", "price_out",
                         *_PLAIN_OBSERVED))


def _plain_catalog(data: Any) -> Catalog | None:
    """The catalog of ``data`` as :func:`_validated_catalog` makes it, when it holds built-in offers only with the
    plainest values: ASCII names of 1-200 characters, no wiring (built-in offers take none), prices that are finite
    floats from 0 or integers from 0 below 2**53 (read as floats), flags that are booleans, a ``context`` that is
    an integer from 0, nothing else, no policy envelope, every id once. Else None (anything else, valid or not,
    is for the models to judge). ``tests/unit/test_catalog_plain.py`` holds it equal to the models' answer."""
    if type(data) is not dict or not data.keys() <= {"offers", "policy_envelope"} \
            or data.get("policy_envelope") is not None:
        return None
    items = data.get("offers")
    if type(items) is not list:
        return None
    protocols = TRANSPORTS[BUILTIN].protocols
    offers: list[Offer] = []
    for item in items:
        if type(item) is not dict or not item.keys() <= _PLAIN_KEYS or item.get("transport") != BUILTIN \
                or type(item.get("protocol")) is not str or item["protocol"] not in protocols \
                or any(item.get(key) is not None for key in _PLAIN_UNSET):
            return None
        # ASCII names only: a lone surrogate (which JSON can escape) is no valid string to the models.
        if not all(type(name := item.get(key)) is str and 1 <= len(name) <= 200 and name.isascii()
                   for key in _PLAIN_NAMES):
            return None
        prices = [item.get("price_in"), item.get("price_out")]
        if (prices[0] is None) != (prices[1] is None):  # one price without the other: the models refuse it
            return None
        if not all(price is None or (type(price) is float and math.isfinite(price) and price >= 0)
                   or (type(price) is int and 0 <= price < 2**53) for price in prices):  # ints exact as floats
            return None
        context = item.get("context")
        if not all(item.get(key) is None or type(item[key]) is bool for key in _PLAIN_FLAGS) \
                or not (context is None or (type(context) is int and context >= 0)):
            return None
        if any(offer.id == item["id"] for offer in offers):
            return None
        price_in, price_out = (None if price is None else float(price) for price in prices)
        offers.append(Offer(id=item["id"], provider=item["provider"], family=item["family"], model=item["model"],
                            protocol=item["protocol"], transport=BUILTIN, price_in=price_in, price_out=price_out,
                            observations={key: item[key] for key in _PLAIN_OBSERVED if item.get(key) is not None}))
    return Catalog(tuple(offers), None)


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


def load_deployed_catalog(path: str) -> Catalog:
    """The catalog the layer ships (``layers/compactor/Makefile``, docs/deploy.md "Real model providers and their
    keys"): :func:`load_catalog`'s checks, and no offer whose API key only ``api_key_env`` names. template.yaml gives
    the functions no provider key variable, so every call of such an offer would fail ``auth_error`` and every
    compaction keep its units; ``api_key_secret`` is the deployed key (with both, the variable serves local runs)."""
    catalog = load_catalog(path)
    local = [f"offer '{offer.id}' ({offer.api_key_env})" for offer in catalog.offers
             if offer.api_key_env and not offer.api_key_secret]
    if local:
        raise CatalogError(f"catalog {path}: the API key of {', '.join(local)} is named by api_key_env alone, and the "
                           "deployed functions have no such variable (template.yaml sets none): every call would "
                           "fail; add \"api_key_secret\", a Secrets Manager secret (docs/providers.md)")
    return catalog


@cache
def get_catalog() -> Catalog:
    """The container's catalog, loaded once (see :func:`load_catalog`)."""
    return load_catalog()


def reset_catalog_cache() -> None:
    """Forget the cached catalog (tests, or after changing ``COMPACTOR_CATALOG``)."""
    get_catalog.cache_clear()
