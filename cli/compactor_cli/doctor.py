"""``compactor doctor``: check a catalog before compacting with it (docs/providers.md).

Without ``--call`` nothing is sent: the catalog loads, a decider and a JSON-capable summarizer exist,
every key variable is set or secret readable, Bedrock offers have AWS credentials. With ``--call`` each
offer gets one tiny request, and its latency, usage, cost and JSON answer are printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any, TextIO
from urllib.parse import urlsplit

from compactor.catalog import Catalog, CatalogError, load_catalog
from compactor.cost import CACHE_WRITE_PRICE_FACTOR, CACHED_INPUT_PRICE_FACTOR, default_cache_prices_apply
from compactor.jsonutil import loads_within
from compactor.provider_failures import explain
from compactor.providers.base import (
    REASONING_EXHAUSTED, ChatRequest, DecisionRequest, Offer, ProviderError, spent_on_reasoning, unfinished,
)
from compactor.providers.registry import BUILTIN, TRANSPORTS

CALL_TIMEOUT_S = 30.0
PROBE_QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the state's value true?"}}
PROBE_PROMPT = 'Reply with exactly this JSON object: {"ok": true}'
# The offline summarizer answers what the summarizer node sends it, in JSON mode a JSON object of items to
# summarize (docs/offline-offers.md): the probe's text as one item, whose summary comes back as a JSON object.
BUILTIN_PROBE_ITEMS = json.dumps({"ok": PROBE_PROMPT})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", help="catalog JSON to check (default: $COMPACTOR_CATALOG, else the bundled one)")
    parser.add_argument("--call", action="store_true", help="send one tiny request per offer")


def _host(offer: Offer) -> str:
    return urlsplit(offer.base_url).hostname or offer.base_url if offer.base_url else offer.transport


def _problem(offer: Offer, exc: ProviderError) -> str:
    cause, fix = explain(exc.kind, exc.detail or exc.message, exc.http_status, _host(offer))  # the operator's words
    return f"{cause}; fix: {fix}"


def role_problems(catalog: Catalog) -> list[str]:
    """What the catalog lacks to compact: a decider, and a summarizer that can answer JSON."""
    usable = [offer for offer in catalog.offers if offer.observations.get("disabled") is not True]
    problems = []
    if not any(offer.protocol == "decisions" for offer in usable):
        problems.append('no decider: add an offer with "protocol": "decisions" (the catalog replaces the bundled one)')
    if not any(offer.protocol == "chat" and offer.observations.get("supports_json_mode") is True for offer in usable):
        problems.append('no summarizer: add a "protocol": "chat" offer with "supports_json_mode": true')
    return problems


def credential_problem(offer: Offer) -> str | None:
    """Why the offer's credentials cannot be had, or None (nothing is sent)."""
    if offer.transport == "bedrock":
        import boto3

        if boto3.Session().get_credentials() is None:
            return "no AWS credentials for Bedrock; fix: configure a profile or role with bedrock:InvokeModel"
        return None
    from compactor.providers.keys import api_key

    try:
        api_key(offer)
    except ProviderError as exc:
        return _problem(offer, exc)
    return None


async def probe(offer: Offer) -> dict[str, Any]:
    """One tiny request to ``offer``: latency, usage, cost and whether the JSON answer came back."""
    from compactor.providers.registry import transport_for
    from compactor.cost import NODE_DECIMALS, RESPONSE_DECIMALS
    from compactor.router import compute_cost

    transport = transport_for(offer)
    started = time.monotonic()
    try:
        if offer.protocol == "chat":
            json_mode = offer.observations.get("supports_json_mode") is True
            prompt = BUILTIN_PROBE_ITEMS if offer.transport == BUILTIN and json_mode else PROBE_PROMPT
            request = ChatRequest([{"role": "user", "content": prompt}], max_tokens=16, json_mode=json_mode)
            response: Any = await transport.chat(offer, request, CALL_TIMEOUT_S)
            if spent_on_reasoning(response):  # no answer at all: not a JSON mode that does not work
                raise ProviderError(REASONING_EXHAUSTED, f"probe answer {unfinished(response)}")
            try:
                json_ok = isinstance(loads_within(response.text or ""), dict)
            except ValueError:  # the model's text: not JSON, or nested past the parser's limit (NestedTooDeep)
                json_ok = False
            decimals = RESPONSE_DECIMALS
        else:
            request = DecisionRequest(state={"value": True}, questions=PROBE_QUESTIONS)
            response = await transport.decide(offer, request, CALL_TIMEOUT_S)
            json_ok, decimals = True, NODE_DECIMALS  # a decision is only returned when valid
    except ProviderError as exc:
        return {"ok": False, "latency_ms": round((time.monotonic() - started) * 1000), "problem": _problem(offer, exc)}
    cost, _ = compute_cost(offer, response, decimals)
    return {"ok": True, "latency_ms": round((time.monotonic() - started) * 1000), "tokens_in": response.tokens_in,
            "tokens_out": response.tokens_out, "cost_usd": cost, "json": json_ok}


def _call_line(result: dict[str, Any]) -> str:
    if not result["ok"]:
        return f"call failed after {result['latency_ms']} ms: {result['problem']}"
    cost = "unknown" if result["cost_usd"] is None else f"${result['cost_usd']:.6f}"
    json_word = "JSON ok" if result["json"] else "JSON mode NOT working (answer is not a JSON object)"
    return (f"call ok: {result['latency_ms']} ms, tokens {result['tokens_in']} in / {result['tokens_out']} out,"
            f" cost {cost}, {json_word}")


def _where(offer: Offer) -> str:
    """Where the offer's calls go: its base_url, a Bedrock region, nowhere for the offline offers."""
    if offer.transport == BUILTIN:
        return ", offline in this process"
    return f" at {offer.base_url or offer.region or 'the default region'}"


# The default factors of price_in, as a note prints them, by the cache price each stands for.
_FACTORS = {"price_cached_in": f"{CACHED_INPUT_PRICE_FACTOR:.0%}",
            "price_cache_write": f"{CACHE_WRITE_PRICE_FACTOR:.0%}"}
def guessed_cache_prices(offer: Offer) -> tuple[str, ...]:
    """The cache prices a priced offer of a model other than Claude leaves to the default factors of ``price_in``
    (``compactor.cost``), among those its transport's answers can call for (``TransportKind.cache_prices``):
    Claude's, not its model's, so its cost would be a guess (docs/billing.md "Prices the catalog does not state")."""
    if not offer.price_in or default_cache_prices_apply(offer.transport, offer.model):
        return ()
    called_for = TRANSPORTS[offer.transport].cache_prices
    return tuple(name for name in _FACTORS if name in called_for and getattr(offer, name) is None)


# Bedrock's geographic and global cross-Region inference profiles: "<prefix>.<model id>" (docs/providers.md).
_PROFILE_PREFIX = re.compile(r"^(?:us|us-gov|eu|apac|jp|au|ca|global)\.(?=[a-z])")


def deployment_lines(catalog: Catalog) -> list[str]:
    """What template.yaml's parameters must grant this catalog once deployed (docs/providers.md "Deploying with real
    providers"): ``BedrockModelIds`` (each Bedrock offer's id, and the model a cross-Region inference profile routes
    to), ``ProviderKeySecretArns`` (the secrets the offers name, as whole ARNs), and the offers whose key only a
    variable names, which no deployed function has (the layer's build refuses them)."""
    bedrock: dict[str, None] = {}
    secrets: dict[str, None] = {}
    lines = []
    for offer in catalog.offers:
        if offer.transport == "bedrock":
            if offer.model.startswith("arn:"):
                lines.append(f"deploy: offer {offer.id} names {offer.model}, which BedrockModelIds does not cover: "
                             "grant bedrock:InvokeModel on it (and the models it routes to) in a policy of your own")
            else:
                bedrock.update(dict.fromkeys((offer.model, _PROFILE_PREFIX.sub("", offer.model))))
        if offer.api_key_secret:
            secrets[offer.api_key_secret] = None
        elif offer.api_key_env:
            lines.append(f"deploy: offer {offer.id} names its API key by api_key_env ({offer.api_key_env}) alone, "
                         "which no deployed function has: add an api_key_secret (sam build refuses the catalog)")
    if bedrock:
        lines.insert(0, f"deploy with: BedrockModelIds={','.join(bedrock)}")
    if secrets:
        shown = [name if name.startswith("arn:") else f"<the ARN of secret {name}, with its 6-character suffix>"
                 for name in secrets]
        lines.insert(0, f"deploy with: ProviderKeySecretArns={','.join(shown)}")
    return lines


def check(catalog: Catalog, *, call: bool, out: TextIO) -> int:
    """Print the checks of ``catalog``; 0 when all pass, 1 otherwise."""
    failed = False
    for problem in role_problems(catalog):
        print(f"PROBLEM {problem}", file=out)
        failed = True
    for offer in catalog.offers:
        print(f"{offer.id}: {offer.protocol} via {offer.transport} ({offer.model}{_where(offer)})", file=out)
        guessed = guessed_cache_prices(offer)
        if guessed:
            print(f"  note: no {' or '.join(guessed)}: the provider's cache would be priced at Claude's "
                  f"{' and '.join(_FACTORS[name] for name in guessed)} of price_in, which is not this model's "
                  "price; state it (the traces name it as default_cache_prices)", file=out)
        problem = credential_problem(offer)
        if problem:
            print(f"  PROBLEM {problem}", file=out)
            failed = True
            continue
        print("  key: " + ("none needed" if not (offer.api_key_env or offer.api_key_secret) else "resolves"),
              file=out)
        if call:
            from compactor.container import run_sync

            result = run_sync(probe(offer))
            print(f"  {_call_line(result)}", file=out)
            failed = failed or not result["ok"] or not result["json"]
    for line in deployment_lines(catalog):
        print(line, file=out)
    print("doctor: " + ("problems found" if failed else "all checks passed"), file=out)
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    try:
        catalog = load_catalog(args.catalog)
    except CatalogError as exc:
        print(f"compactor doctor: {exc}", file=sys.stderr)
        return 2
    return check(catalog, call=args.call, out=sys.stdout)
