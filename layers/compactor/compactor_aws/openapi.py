"""The API's OpenAPI document (docs/api.md): Powertools generates it from the resolver's routes and the
request models; this module adds what the routes' ``Response[str]`` cannot say (the response bodies and
the error bodies, as pydantic models), examples that run as they are, and the API key schemes.

``GET /v1/openapi.json`` answers it (the handler imports this module on that route's first call: its
models are of no use to any other route; docs/performance.md#lean-imports); ``docs/openapi.json`` is the
same document checked in (``make openapi`` writes it, a test keeps it in sync).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Literal

from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn, HTTPBearer, Server
from pydantic import BaseModel, ConfigDict, Field, model_validator

from compactor import __version__, http_api
from compactor.errors import RETRY_AFTER
from compactor_aws.routes.common import BILLED_ROUTES

TITLE = "Compactor API"
DESCRIPTION = (
    "Compacts LLM agent transcripts: each unit of a conversation (a message, or a tool call with its "
    "results) is kept, summarized or archived so the transcript fits a byte target, with the cost and "
    "every model call reported. Every route needs the stage's API key (`x-api-key`, or "
    "`Authorization: Bearer <key>`)."
)


def _absent_not_null(schema: dict[str, Any]) -> None:
    """A field that is absent or of its type, never null: the items (under one of their two names), a report's
    optional parts."""
    schema.pop("default", None)
    schema.update(schema.pop("anyOf")[0])


class Fragment(BaseModel):
    """One unit of the transcript in decision mode and what happened to it."""

    id: str = Field(description="fragment_<index of the unit's first message>")
    start: int = Field(description="first message index (inclusive)")
    end: int = Field(description="last message index (exclusive)")
    action: Literal["keep", "summarize", "archive"]
    reason: str | None = Field(default=None, description="why the unit got its action (docs/report.md)")
    handle: str | None = Field(default=None, description="restorable requests: the `cmp_…` handle of the "
                                                          "unit's original, for POST /v1/expand")


class Limits(BaseModel):
    """What the output's bytes are made of and the smallest ratio the request could reach (docs/offline-offers.md
    "Targets")."""

    pins_bytes: int
    tail_bytes: int
    kept_units_bytes: int
    summaries_bytes: int
    smallest_ratio: float = Field(description="the ratio with every candidate archived: pins and tail alone")
    limited_by: Literal["pins", "tail", "kept_units", "summaries"] | None = Field(
        description="the largest of the four parts")
    request_limits: list[str] = Field(description="the preparation limits the request hit (as `reasons`)")


class Compaction(BaseModel):
    """The decision-mode report (docs/report.md explains each field)."""

    original_bytes: int
    output_bytes: int
    target_bytes: int
    target_ratio: float
    target_met: bool
    fragments: list[Fragment] = Field(description="every unit in order (bounded: see fragments_omitted)")
    reasons: list[str] = Field(description="preparation limits hit (fragment_or_decision_context_limit, "
                                           "fragment_limit, batch_limit, flow_input_limit)")
    flow_fingerprint: str | None
    first_changed_index: int | None = Field(description="first output message that differs from the input")
    preserved_prefix_bytes: int = Field(description="serialized bytes of the unchanged prefix (prompt cache)")
    limits: Limits | None = Field(default=None, json_schema_extra=_absent_not_null,
                                  description="one request's answer: what its output is made of")
    fragments_omitted: int | None = Field(default=None, json_schema_extra=_absent_not_null,
                                          description="units left out of `fragments` by its bound")
    fallbacks: dict[str, int] | None = Field(
        default=None, json_schema_extra=_absent_not_null,
        description="the flow nodes that fell back or failed, counted by error kind (`{\"exhausted\": 4}`); absent "
                    "when none did: their units were kept (docs/report.md)")


class MaskedOutput(BaseModel):
    """One tool output mask mode replaced by its placeholder."""

    index: int = Field(description="the item's index")
    tool_call_id: str | None = Field(description="the call the output answered")
    name: str | None = Field(description="the tool's name, when the call names it")
    original_bytes: int


class MaskCompaction(BaseModel):
    """The mask-mode report."""

    mode: Literal["mask"]
    original_bytes: int
    output_bytes: int
    masked: list[MaskedOutput]
    first_changed_index: int | None = Field(description="first output message that differs from the input")
    preserved_prefix_bytes: int = Field(description="serialized bytes of the unchanged prefix (prompt cache)")


class CompactResponse(BaseModel):
    """Answer of ``POST /v1/compact``: the compacted messages, in the request's own format."""

    # The items come back under the request's own name: ``input`` in openai-responses, else ``messages``.
    model_config = ConfigDict(extra="allow", json_schema_extra={
        "oneOf": [{"required": ["messages"]}, {"required": ["input"]}]})

    messages: list[dict[str, Any]] | None = Field(default=None, json_schema_extra=_absent_not_null,
                                                  description="the items (openai-chat, anthropic-messages)")
    input: list[dict[str, Any]] | None = Field(default=None, json_schema_extra=_absent_not_null,
                                               description="the items (openai-responses)")
    compacted: bool = Field(description="whether the output differs from the input")
    compaction: Compaction | MaskCompaction | None = Field(default=None, description="decision and mask modes")
    usage: dict[str, Any] | None = Field(default=None, description="token totals, when a model reported them")
    x_router: dict[str, Any] | None = Field(default=None, description="cost, models and the decision trace, "
                                                                      "when a model was called")

    @model_validator(mode="after")
    def _items_under_one_name(self) -> CompactResponse:
        if (self.messages is None) == (self.input is None):
            raise ValueError("the items are under exactly one of 'messages' and 'input'")
        return self


class FlowsResponse(BaseModel):
    """Answer of ``POST /v1/flows``: the flow's output value and its trace."""

    output: Any
    x_router: dict[str, Any]
    usage: dict[str, Any] | None = None


class NormalizeResponse(BaseModel):
    """Answer of ``POST /v1/flows/normalize``: the canonical flow and its identity."""

    flow_ir: Any
    encoded: str
    fingerprint: str
    version: Literal["sigma-flow/v1"]


class UsageDay(BaseModel):
    """One day's totals of the caller's billed calls (``compactor.billing.DayTotals``; a test holds the fields
    equal), in bytes, counts and US dollars (docs/billing.md)."""

    model_config = ConfigDict(extra="allow")

    day: str = Field(description="the day, YYYY-MM-DD (UTC)")
    calls: int = Field(description="billed calls (a replayed Idempotency-Key is not billed again)")
    bytes_in: int = Field(description="bytes of the transcripts in (dense JSON)")
    bytes_out: int = Field(description="bytes of the transcripts out (dense JSON)")
    bytes_saved: int = Field(description="bytes_in - bytes_out")
    model_calls: int = Field(description="model calls made")
    cost_usd: float = Field(description="cost in US dollars of the calls whose cost is known, rounded to 10 "
                                        "decimals; the others are counted in calls_cost_unknown, never as free")
    calls_cost_unknown: int = Field(description="calls whose cost is unknown (not in cost_usd)")


class Usage(BaseModel):
    """Answer of ``GET /v1/usage``: the caller's own totals per day (docs/billing.md)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    api_key_id: str | None
    from_: str = Field(alias="from", description="first day, YYYY-MM-DD")
    to: str = Field(description="last day, YYYY-MM-DD")
    days: list[UsageDay] = Field(description="the days with billed calls, in order (days without are left out)")


class PresignedRequest(BaseModel):
    url: str
    method: str | None = None
    headers: dict[str, str] | None = None
    expires_in: int


class Upload(BaseModel):
    """Answer of ``POST /v1/uploads`` (201): a job and where to PUT its transcript (docs/scale.md)."""

    job_id: str
    status: Literal["awaiting_upload"]
    upload: PresignedRequest
    status_url: str


class Job(BaseModel):
    """Answer of ``GET /v1/jobs/{id}``: the job's status, and when done where to GET its result."""

    job_id: str
    status: Literal["awaiting_upload", "running", "done", "failed"]
    result: PresignedRequest | None = Field(default=None, description="done: a presigned GET of the "
                                                                       "/v1/compact response body")
    error: Any = Field(default=None, description="failed: the recorded error")
    error_status: int | None = None


class Expand(BaseModel):
    """Answer of ``POST /v1/expand``: the originals of the caller's own handles (docs/archives.md)."""

    originals: dict[str, list[dict[str, Any]]] = Field(description="handle -> the unit's items, byte-identical")


class Health(BaseModel):
    """The service's health (503 when its catalog does not load)."""

    ok: bool
    version: str
    error: str | None = Field(default=None, description="503 only: why the catalog does not load")


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str | None


class ErrorBody(BaseModel):
    """Every 4xx/5xx the service decides."""

    error: ErrorDetail


class ValidationErrorBody(BaseModel):
    """422: the body failed schema validation; one entry per problem (capped)."""

    detail: list[dict[str, Any]]


class Forbidden(BaseModel):
    """403 without a valid key (API Gateway's own answer)."""

    message: Literal["Forbidden"]


class Throttled(BaseModel):
    """429 past the key's rate or monthly quota (API Gateway's own answer; docs/billing.md#limits)."""

    message: str


def _tool_call(call_id: str, command: str, output: str) -> list[dict[str, Any]]:
    arguments = json.dumps({"command": command})
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": output}]


EXAMPLE_MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Make the failing test in tests/test_io.py pass."},
    *_tool_call("call_1", "find . -name '*.py' | sort", "\n".join(
        f"./src/reader/module_{i:02d}.py" for i in range(60)) + "\n./tests/test_io.py"),
    *_tool_call("call_2", "pip install -e .", "\n".join(
        f"Collecting dependency-{i} (from reader==0.1)\n  Using cached dependency_{i}-1.0-py3-none-any.whl"
        for i in range(25)) + "\nSuccessfully installed reader-0.1"),
    {"role": "assistant", "content": "The reader assumes UTF-8; I will pass the file's declared encoding."},
    {"role": "user", "content": "Go ahead."},
]
SUMMARY_POLICY = ["policy", ["meets_req"], ["neg", ["field", "price_in"]], ["argmax"], ["id"],
                  ["always", {"action": "next_candidate"}]]
EXAMPLE_FLOW = ["flow", {
    "n0": {"kind": "input"},
    "n1": {"kind": "llm", "system": "Summarise the user's text in one line.", "policy": SUMMARY_POLICY,
           "inputs": ["n0"], "max_tokens": 64},
    "n2": {"kind": "output", "inputs": ["n1"]},
}]


def request_examples() -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """Request examples per ``(method, path)``; each runs with the built-in offline offers (a test does)."""
    from compactor.compaction.preset import default_decision_policy

    decision_policy = default_decision_policy()
    return {
        ("post", "/compact"): {
            "decision": {"summary": "Decision mode: each unit kept, summarized or archived toward a 10% target",
                         "value": {"messages": EXAMPLE_MESSAGES, "decision_policy_ir": decision_policy,
                                   "target_ratio": 0.1, "keep_recent": 2}},
            "seal": {"summary": "Seal mode: the aged middle sealed into one summary, the last 2 messages kept",
                     "value": {"messages": EXAMPLE_MESSAGES, "keep_recent": 2}},
        },
        ("post", "/flows"): {
            "one-llm-node": {"summary": "A flow with one model node summarising its input",
                             "value": {"flow_ir": EXAMPLE_FLOW,
                                       "flow_input": "pytest: 1 failed, 2 passed; UnicodeDecodeError in "
                                                     "tests/test_io.py on latin-1 input"}},
        },
        ("post", "/flows/normalize"): {
            "one-llm-node": {"summary": "The canonical form and fingerprint of the same flow",
                             "value": {"flow_ir": EXAMPLE_FLOW}},
        },
    }


SUMMARIES = {
    ("get", "/healthz"): "Liveness and version",
    ("get", "/usage"): "Your usage per day",
    ("post", "/compact"): "Compact a transcript",
    ("post", "/flows"): "Run a flow",
    ("post", "/flows/normalize"): "Normalize a flow (no model call)",
    ("post", "/uploads"): "Start a job for a large transcript",
    ("get", "/jobs/{job_id}"): "A job's status and result",
    ("post", "/expand"): "The originals behind restorable handles",
}
RESPONSES: dict[tuple[str, str], type[BaseModel]] = {
    ("get", "/healthz"): Health,
    ("get", "/usage"): Usage,
    ("post", "/compact"): CompactResponse,
    ("post", "/flows"): FlowsResponse,
    ("post", "/flows/normalize"): NormalizeResponse,
    ("post", "/uploads"): Upload,
    ("get", "/jobs/{job_id}"): Job,
    ("post", "/expand"): Expand,
}
SUCCESS_STATUS = {("post", "/uploads"): "201"}
ERRORS: dict[str, tuple[str, type[BaseModel]]] = {
    "400": ("the request is well formed but cannot be served (invalid policy or flow, bad pins, an invalid "
            "Idempotency-Key)", ErrorBody),
    "403": ("no valid API key", Forbidden),
    "404": ("no such job or handle (or not the caller's)", ErrorBody),
    "413": ("the body is over 10 MiB (`request_too_large`), or the answer would be over the 6 MB response limit "
            "(`response_too_large`): send large transcripts through the S3 path or uploads", ErrorBody),
    "415": ("the body is declared as another media type than application/json, in another charset than UTF-8, or compressed", ErrorBody),
    "422": ("the body failed schema validation", ValidationErrorBody),
    "500": ("unexpected failure (details are in the logs, never in the answer)", ErrorBody),
    "503": ("uploads are not configured on this deployment", ErrorBody),
}
ERROR_SCOPE = {"404": {"/jobs/{job_id}", "/expand"}, "503": {"/uploads", "/jobs/{job_id}"},
               "415": {"/compact", "/expand", "/flows", "/flows/normalize", "/uploads"}}
THROTTLED = ("the key's rate or monthly quota is spent (API Gateway's answer, `message`): past the rate, retry after "
             "`Retry-After`; past the quota, next month", Throttled)
"""Every route's 429, beside a route's own (docs/billing.md#limits)."""
AMBIGUOUS_KEY = ("two different API keys: two `x-api-key` headers, or `x-api-key` and `Authorization: Bearer` "
                 "(`ambiguous_api_key`)", ErrorBody)
"""Every route's 400 for an ambiguous credential, beside a route's own (docs/billing.md#bearer-keys)."""
ROUTE_ERRORS: dict[tuple[str, str], dict[str, tuple[str, type[BaseModel]]]] = {
    ("get", "/healthz"): {"503": ("the catalog does not load: `ok` is false and `error` says why", Health)},
    ("post", "/flows"): {status: (f"the flow failed without a fallback (`router_error`, the code the error kind: "
                                  f"{kinds}); `x_router` beside `error` traces it", ErrorBody)
                         for status, kinds in (("401", "`auth_error`"), ("429", "`rate_limit`"),
                                               ("502", "any other"), ("503", "`no_candidates`"),
                                               ("504", "`timeout`, `flow_deadline`"),
                                               ("422", "`data_error`: a data operation that does not fit its data"),
                                               ("400", "`bad_request`, `context_overflow`"))},
    ("get", "/jobs/{job_id}"): {"410": ("the job's upload and result expired: the deployment keeps them "
                                        "`TranscriptRetentionDays` (`job_expired`, docs/deploy.md#data-retention)",
                                        ErrorBody)},
    ("get", "/usage"): {"422": ("`from` or `to` is not a date YYYY-MM-DD or is given twice, `from` is after `to`, "
                                "or the range spans more than 366 days (`invalid_usage_range`; the message names "
                                "every bad parameter)", ErrorBody)},
}
"""A route's own answer for a status, where it is not the one of :data:`ERRORS`."""
ROUTE_ERRORS_BESIDE: dict[tuple[str, str], frozenset[str]] = {("post", "/flows"): frozenset({"400"})}
"""The statuses of :data:`ROUTE_ERRORS` that a route answers beside the general cause, not instead of it (a flow
that is not admitted is 400 ``invalid_flow``, a flow whose model call was refused 400 ``bad_request``)."""

IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": False,
    "description": "makes retries safe: the same key and body within the TTL (24 h) replay the stored answer "
                   "byte for byte, without computing or billing again; another body under the key is 422 "
                   "`idempotency_key_reused`, a retry while the first request runs 409 (docs/billing.md)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"}}
REPLAYED_HEADER = {"Idempotent-Replayed": {"description": "`true` when the answer is the stored answer of an "
                                                          "earlier request with the same Idempotency-Key",
                                           "schema": {"type": "string", "enum": ["true"]}}}
RETRY_AFTER_HEADER = {RETRY_AFTER: {
    "description": "when to retry, in whole seconds (docs/behaviour.md#retry-after): 1 on the 429 past the key's "
                   "rate (none on the 429 past its monthly quota); 5 on a billed route's 409 "
                   "`idempotency_in_progress` and 503 `idempotency_unavailable`; on `POST /v1/flows`' router errors "
                   "(429, 5xx) the wait the provider asked for, rounded up, when it asked for one",
    "schema": {"type": "integer", "minimum": 1}}}
RETRY_AFTER_ANSWERS: dict[tuple[str, str], frozenset[str]] = {("post", "/flows"): frozenset({"429", "502", "503",
                                                                                              "504"})}
"""A route's own answers that may carry ``Retry-After`` beside every route's 429 and a billed route's 409 and 503: a
router error with a status a retry may change passes on the provider's wait (``compactor.errors.RouterError``)."""
IDEMPOTENCY_ERRORS: dict[str, tuple[str, type[BaseModel]]] = {
    "409": ("the first request with this Idempotency-Key is still running (`idempotency_in_progress`): "
            "retry after `Retry-After`", ErrorBody),
    "503": ("with an Idempotency-Key: the idempotency store is unavailable (`idempotency_unavailable`): retry "
            "after `Retry-After`", ErrorBody),
}
QUERY_PARAMETERS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("get", "/usage"): [
        {"name": "from", "in": "query", "required": False, "schema": {"type": "string", "format": "date"},
         "description": "first day, YYYY-MM-DD (default: the first of `to`'s month)"},
        {"name": "to", "in": "query", "required": False, "schema": {"type": "string", "format": "date"},
         "description": "last day, YYYY-MM-DD, included (default: today, UTC); `from` to `to` spans at most 366 "
                        "days, both included"},
    ],
}


# What each request body and field means, for the reader of the document (the models' docstrings speak to
# the code's maintainers).
REQUEST_DOCS: dict[str, tuple[str, dict[str, str]]] = {
    "CompactRequest": ("A transcript to compact. With `decision_policy_ir` (decision mode) every unit is kept, "
                       "summarized or archived toward `target_ratio`; without it (seal mode) the aged middle "
                       "of the conversation is sealed into one summary.", {
        "messages": "the conversation in `format` (openai-chat: messages with `role` and `content`, and "
                    "`tool_calls`); openai-responses sends `input` instead",
        "keep_recent": "the last N messages are never changed",
        "policy_ir": "routing policy for the summary calls (Σ_pol term); default: the cheapest capable offer",
        "max_tokens": "most tokens one summary call may generate",
        "decision_policy_ir": "routing policy for the decision calls; its presence selects decision mode",
        "target_ratio": "decision mode: aim for output bytes ≤ this share of the input (0 < r ≤ 1)",
        "pinned_indices": "decision and mask modes: message indexes never changed (default: every user message "
                          "but a text agent's tool observations; system and developer messages are always pinned)",
        "format": "openai-chat (default), anthropic-messages or openai-responses (items in `input`); the "
                  "answer uses the same format (docs/formats.md)",
        "restorable": "decision mode: keep the originals of changed units; the manifest and markers carry "
                      "handles for POST /v1/expand (docs/archives.md); 400 in seal and mask modes",
    }),
    "ExpandRequest": ("Handles from a restorable compaction.", {"handles": "1 to 256 `cmp_…` handles"}),
    "FlowsRequest": ("A flow (Σ_flow term: named nodes of kinds input, llm, decision, data, output) and its "
                     "input.", {"flow_ir": "the flow term", "flow_input": "the value the input node yields"}),
    "NormalizeRequest": ("A flow to admit and normalize without running it.", {"flow_ir": "the flow term"}),
}


def _describe_requests(components: dict[str, Any]) -> None:
    for name, (description, fields) in REQUEST_DOCS.items():
        schema = components.get(name)
        if schema is None:
            continue
        schema["description"] = description
        for field, text in fields.items():
            if field in schema.get("properties", {}):
                schema["properties"][field]["description"] = text
    _items_under_their_name(components.get("CompactRequest"))


def _items_under_their_name(schema: dict[str, Any] | None) -> None:
    """What the request model's validators say and its generated schema cannot: openai-responses sends its
    items as ``input`` (docs/formats.md), so a body needs ``messages`` or ``input``; ``mode`` names a
    registered mode."""
    from compactor.compaction.modes import names

    if schema is None:
        return
    properties = schema.setdefault("properties", {})
    properties["input"] = {**properties["messages"], "title": "Input", "description": (
        "openai-responses: the items (`message`, `function_call`, `function_call_output`, `reasoning`, …), "
        "instead of `messages`")}
    properties["mode"] = {"anyOf": [{"enum": list(names()), "type": "string"}, {"type": "null"}], "title": "Mode",
                          "description": "the compaction mode; absent: `decision` with `decision_policy_ir`, "
                                         "else `seal` (docs/behaviour.md)"}
    schema.pop("required", None)
    schema["anyOf"] = [{"required": ["messages"]}, {"required": ["input"]}]


def _component(model: type[BaseModel], components: dict[str, Any]) -> dict[str, str]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}", by_alias=True)
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def document(app: Any) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (the handler's resolver), completed with bodies and examples."""
    doc = json.loads(app.get_openapi_json_schema(
        title=TITLE, version=__version__, description=DESCRIPTION,
        servers=[Server(url=f"/{http_api.STAGE}", description="the API stage (and compactor serve)")],
        security_schemes={"apiKey": APIKey(name="x-api-key", **{"in": APIKeyIn.header}),
                          "bearer": HTTPBearer(description="the same API key as a Bearer token")},
        security=[{"apiKey": []}, {"bearer": []}]))
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    _describe_requests(components)
    examples = request_examples()
    for path, operations in doc.get("paths", {}).items():
        for method, operation in operations.items():
            if (method, path) in SUMMARIES:
                operation["summary"] = SUMMARIES[(method, path)]
            responses = operation.setdefault("responses", {})
            model = RESPONSES.get((method, path))
            if model is not None:
                responses.pop("200", None)
                responses[SUCCESS_STATUS.get((method, path), "200")] = {"description": model.__doc__.strip().splitlines()[0] if model.__doc__ else "OK",
                                    "content": {"application/json": {"schema": _component(model, components)}}}
            for status, (description, error_model) in ERRORS.items():
                if (status == "400" and method == "get") or path not in ERROR_SCOPE.get(status, {path}):
                    continue
                responses[status] = {"description": description,
                                     "content": {"application/json": {"schema": _component(error_model, components)}}}
            for status, (description, error_model) in ROUTE_ERRORS.get((method, path), {}).items():
                if status not in ROUTE_ERRORS_BESIDE.get((method, path), ()):
                    responses.pop(status, None)  # this route's own answer replaces the general one
                _respond(responses, status, description, _component(error_model, components))
            _respond(responses, "400", AMBIGUOUS_KEY[0], _component(AMBIGUOUS_KEY[1], components))
            _respond(responses, "429", THROTTLED[0], _component(THROTTLED[1], components))
            for status in sorted({"429", *RETRY_AFTER_ANSWERS.get((method, path), ())}):
                responses[status]["headers"] = RETRY_AFTER_HEADER
            if (method, path) in QUERY_PARAMETERS:
                operation.setdefault("parameters", []).extend(QUERY_PARAMETERS[(method, path)])
            if (method, path) in BILLED_ROUTES:  # they take an Idempotency-Key
                _idempotent(operation, responses, components)
                own_422 = ROUTE_ERRORS.get((method, path), {}).get("422")
                if own_422 is not None:  # the Idempotency-Key's 422 keeps the route's own cause beside it
                    _respond(responses, "422", own_422[0], _component(own_422[1], components))
            request = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if request is not None and (method, path) in examples:
                request["examples"] = examples[(method, path)]
    return doc


def _respond(responses: dict[str, Any], status: str, description: str, schema: dict[str, Any]) -> None:
    """Document ``status``; a status already documented (by another cause) keeps both causes and both schemas."""
    held = responses.get(status)
    if held is None:
        responses[status] = {"description": description, "content": {"application/json": {"schema": schema}}}
        return
    held["description"] = f"{held['description']}; or {description}"
    content = held.setdefault("content", {}).setdefault("application/json", {})
    known = content.get("schema")
    schemas = known["anyOf"] if known and "anyOf" in known else [known] if known else []
    if schema not in schemas:
        content["schema"] = {"anyOf": [*schemas, schema]} if schemas else schema


def _idempotent(operation: dict[str, Any], responses: dict[str, Any], components: dict[str, Any]) -> None:
    """The Idempotency-Key header of a billed route and the answers it adds (docs/billing.md)."""
    operation.setdefault("parameters", []).append(IDEMPOTENCY_KEY)
    for status in ("200", "201"):
        if status in responses:
            responses[status]["headers"] = REPLAYED_HEADER
    for status, (description, error_model) in IDEMPOTENCY_ERRORS.items():
        _respond(responses, status, description, _component(error_model, components))
        responses[status]["headers"] = RETRY_AFTER_HEADER  # both ask to retry later
    responses["422"] = {
        "description": "the body failed schema validation (`detail`), or the Idempotency-Key came with another "
                       "body (`error`, `idempotency_key_reused`)",
        "content": {"application/json": {"schema": {"anyOf": [_component(ValidationErrorBody, components),
                                                              _component(ErrorBody, components)]}}}}


@lru_cache(maxsize=2)
def document_text(app: Any) -> str:
    """The document as ``docs/openapi.json`` holds it (indented, sorted keys, final newline)."""
    return json.dumps(document(app), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

