"""Why model calls failed, in plain words with the fix (docs/providers.md): read from the routing
traces of a call's model nodes (``CallRecord.nodes``), grouped by offer and cause. The CLI report,
``compactor serve`` and ``compactor doctor`` print these; nothing here ever sees a key.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from compactor.call_record import MODEL_NODE_KINDS, CallRecord, NodeOutcome
from compactor.policy.trace import OPERATOR_DETAIL
from compactor.providers.reasoning import PROVIDER_SAID

_KEY_NOT_SET = re.compile(r"API key variable (\w+) is not set")
_SECRET_REASON = re.compile(r"API key secret \S+ cannot be read \((\w+)\)")
_SECRET_FIXES = {  # Secrets Manager's error codes (compactor_aws.secrets names them)
    "AccessDeniedException": "give the functions the secret's whole ARN (with its 6-character suffix) in "
                             "ProviderKeySecretArns; a secret encrypted with a customer managed KMS key also needs "
                             "kms:Decrypt on that key for the functions' roles",
    "ResourceNotFoundException": "no secret of that name in this account and Region: check the offer's "
                                 "api_key_secret (a name or a whole ARN) and its Region",
    "DecryptionFailure": "the secret's KMS key cannot be used: grant the functions' roles kms:Decrypt on it",
}


@dataclass(frozen=True, order=True)
class Cause:
    offer: str  # the offer id, or "-" when no offer was tried
    cause: str  # what went wrong, in plain words
    fix: str  # what to do about it


def _host(base_url: str | None) -> str:
    return (urlsplit(base_url).hostname or base_url) if base_url else "the provider"


def explain(kind: str, message: str, http_status: int | None = None, host: str = "the provider") -> tuple[str, str]:
    """``(cause, fix)`` for one failure of ``kind`` (a router error kind, or a node/flow error)."""
    kind = kind.removeprefix("exhausted: ")
    missing = _KEY_NOT_SET.search(message)
    secret_fix = "check the secret exists and the function may read it (ProviderKeySecretArns)"
    if missing and "secret" in message:  # an offer with both: the variable locally, the secret deployed
        return message, f"export {missing.group(1)}=<key> (local), or {secret_fix} (deployed)"
    if missing:
        return (f"{missing.group(1)} is not set",
                f"export {missing.group(1)}=<key> (local) or give the offer an api_key_secret (deployed)")
    if kind == "auth_error" and "secret" in message:
        reason = _SECRET_REASON.search(message)
        return message, _SECRET_FIXES.get(reason.group(1) if reason else "", secret_fix)
    if kind == "auth_error" and http_status in (400, 402, 429):  # kind_for_status: the account is out of credit
        return (f"{http_status} from {host}: the account has no credit left",
                f"add credit or raise the spend limit at {host}")
    if kind == "auth_error":
        status = f"{http_status} from {host}" if http_status else f"{host} refused the credentials"
        return status, f"check the API key for {host} (and that it may use this model)"
    if kind == "network_error":
        return f"cannot reach {host}", "check base_url and that the server is running and reachable"
    if kind == "timeout":
        return f"no answer from {host} in time", "raise the node's timeout or the flow budget, or use a faster offer"
    if kind == "rate_limit":
        return f"rate limited by {host}", "lower max_concurrency for this offer or raise the provider's quota"
    if kind == "reasoning_exhausted":  # providers.base.REASONING_EXHAUSTED (docs/providers.md "Reasoning models")
        return ("the model spent its output budget on reasoning and gave no answer",
                "raise the offer's reasoning_budget_tokens or lower its reasoning_effort (or raise max_tokens), "
                "or fall back to a model that does not reason")
    if kind == "context_overflow":
        return f"request larger than the model's context at {host}", "set the offer's context so larger requests skip it"
    if kind == "bad_response":
        if "refused or filtered" in message:  # providers.base.unfinished: finish_reason content_filter
            return ("model refused the request, or a content filter stopped its answer",
                    "add an offer of another model to fall back to, or check what the request sends")
        if "cut off" in message or "length" in message:
            return "model answer cut off at max_tokens", "raise max_tokens or choose a model that answers briefly"
        if "not strict JSON" in message or "not valid JSON" in message or "is not {" in message or "empty" in message:
            return "model answered non-JSON", "use a model that follows JSON instructions (supports_json_mode)"
        if "invalid decision" in message:
            return "model answered an invalid decision", "use a stronger decider; its answers are checked strictly"
        return f"unusable answer from {host}", "check the offer's transport matches the server's API"
    if kind == "upstream_error":
        status = f"{http_status} from {host}" if http_status else f"{host} failed"
        return status, "the provider failed: retry later or add another offer to fail over to"
    if kind == "bad_request" and http_status is not None and 300 <= http_status < 400:
        return (f"{host} redirects ({http_status})",
                "set the offer's base_url to the address the error message names (redirects are not followed)")
    if kind == "bad_request" and "in the catalog, replace" in message:  # providers.reasoning.thinking_refusal
        said, _, fix = message.partition(": in the catalog, ")
        return said, f"in the catalog, {fix.partition(f'; {PROVIDER_SAID}')[0]}"
    if kind == "bad_request" and http_status == 404:  # most often a base_url one path segment off
        return (f"404 from {host}",
                "check the offer's base_url, to which the transport appends its path (openai and chat-decisions "
                "/chat/completions, so an OpenAI-compatible root ends in /v1; anthropic /v1/messages, so its base_url "
                "is https://api.anthropic.com without /v1; decisions /decisions), and its model name (bedrock: the model or "
                "inference profile id and the offer's region)")
    if kind == "bad_request":
        status = f"{http_status} from {host}" if http_status else f"{host} refused the request"
        return status, "check the offer's model name and transport"
    if kind == "no_candidates":
        return "no offer could take this call", ("the catalog needs a decisions offer and a chat offer with "
                                                 "supports_json_mode, whose context fits the request")
    if kind == "flow_deadline" or "deadline" in message:
        return "the request's time budget ran out", "raise COMPACTOR_FLOW_BUDGET_MS or use faster offers"
    return f"{kind}: {message}"[:200], "see the --json output's x_router.decision_trace"


def _attempt_failures(trace: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for event in trace.get("decision_path") or []:
        if isinstance(event, dict) and event.get("event") == "attempted" and event.get("error_kind"):
            yield event


def _model_calls(nodes: Iterable[NodeOutcome]) -> Iterator[tuple[Mapping[str, Any], str | None]]:
    """Every model call's routing trace with its final error (None when it succeeded)."""
    for node in nodes:
        if node.kind in MODEL_NODE_KINDS:
            trace = node.trace.get("decision_trace")
            yield trace if isinstance(trace, dict) else {}, node.trace.get("error")


def failure_causes(nodes: Iterable[NodeOutcome], base_url_of: Callable[[str], str | None] = lambda _: None
                   ) -> list[tuple[Cause, int]]:
    """``[(cause, count)]`` of every failed attempt and every call that ended failed, most frequent first,
    from a call's nodes (``CallRecord.nodes``).

    ``base_url_of(offer_id)`` names the host in the words (the catalog's ``base_url``)."""
    counts: Counter[Cause] = Counter()
    for trace, final_error in _model_calls(nodes):
        attempts = list(_attempt_failures(trace))
        for event in attempts:
            offer = str(event.get("offer"))
            # the operator's words where the trace holds them (a key's variable or secret name; never in an answer)
            message = event.get(OPERATOR_DETAIL) or event.get("error_message") or ""
            cause, fix = explain(str(event["error_kind"]), str(message),
                                 event.get("http_status"), _host(base_url_of(offer)))
            counts[Cause(offer, cause, fix)] += 1
        if final_error and not attempts:  # failed before any offer was tried
            kind, _, message = str(final_error).partition(": ")
            cause, fix = explain(kind, message or kind)
            counts[Cause("-", cause, fix)] += 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def fallback_count(nodes: Iterable[NodeOutcome]) -> int:
    """How many model calls fell back: a flow node used its fallback or failed, or a seal call failed
    (the seal then returns the original)."""
    return sum(1 for node in nodes if node.kind in MODEL_NODE_KINDS and node.fell_back)


def calls_fell_back(record: CallRecord) -> int:
    """How many model calls of a call fell back: its nodes' (:func:`fallback_count`), or, for a windowed run, whose
    record holds no nodes, its windows' fallbacks (one per flow node that fell back or failed,
    ``compactor.compaction.windowed.run_record``)."""
    return fallback_count(record.nodes) if record.nodes else len(record.fallbacks)
