"""Lambda handler of ``CompactApi``: every route of the HTTP API, each one call into ``compactor.service``.

POST routes are billed through ``compactor_aws.billing`` and ``GET /usage`` reads it (docs/billing.md).

API Gateway delivers ``/v1/compact`` on stage ``v1`` with ``path`` ``/compact``, so the routes below
carry no stage prefix; ``/v1`` is also stripped when a custom domain passes it through. The core
(``compactor.service`` and what it pulls in) is imported on first use to keep cold starts lean.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import http_api
from compactor.jsonutil import bounded_loads, dense_dumps
from compactor.models import CompactRequest, ExpandRequest, FlowsRequest, NormalizeRequest
from compactor_aws import observability, openapi
from compactor_aws import snapstart
from compactor_aws.routes import jobs as jobs_routes

# The template sets these names; the defaults keep `compactor serve` and tests working without them.
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "compactor"))
snapstart.register()  # warm the core before a SnapStart snapshot (docs/performance.md)
tracer = Tracer()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Compactor"))
app = APIGatewayRestResolver(enable_validation=True, strip_prefixes=[f"/{http_api.STAGE}"],
                             json_body_deserializer=bounded_loads)  # depth/number limits: docs/reliability.md


def _json(status: int, body: Any) -> Response[str]:
    return Response(status_code=status, content_type=http_api.JSON_CONTENT_TYPE, body=dense_dumps(body))


def _billed(route: str, run: Callable[[], tuple[int, dict[str, Any]]], **details: Any) -> Response[str]:
    """The call's response, replayed under its Idempotency-Key or computed (then observed), billed once."""
    from compactor_aws import billing

    answer = billing.answer_observed(app.current_event.raw_event, route, run, lambda_context=app.lambda_context,
                                     logger=logger, metrics=metrics, tracer=tracer, **details)
    return Response(status_code=answer.status, content_type=http_api.JSON_CONTENT_TYPE, body=answer.body,
                    headers=answer.headers)


@app.get("/healthz")
def healthz() -> Response[str]:
    from compactor import service

    return _json(*service.health())


@app.get("/usage")
def usage() -> Response[str]:
    from compactor_aws import billing

    return _json(*billing.usage_answer(app.current_event.raw_event))


@app.post("/compact")
def compact(request: CompactRequest) -> Response[str]:
    from compactor import service
    from compactor_aws.stepfunctions_runner import configured_runner  # None unless BatchFanOut=stepfunctions

    return _billed("compact", lambda: service.handle_compact(request, lambda_context=app.lambda_context,
                                                             flow_runner=configured_runner(),
                                                             archive=_archive() if request.restorable else None),
                   mode="decision" if request.decision_mode else "legacy", request_messages=request.messages)


def _archive() -> Any:
    """The caller's restorable originals (docs/archives.md)."""
    from compactor.archives import Archive
    from compactor_aws.archive_store import configured_store
    from compactor_aws.caller import caller_of

    return Archive(configured_store(), caller_of(app.current_event.raw_event))


@app.post("/expand")
def expand(request: ExpandRequest) -> Response[str]:
    from compactor import service

    return _billed("expand", lambda: service.handle_expand(request.handles, archive=_archive()), mode="none")


@app.post("/flows")
def flows(request: FlowsRequest) -> Response[str]:
    from compactor import service

    return _billed("flows", lambda: service.handle_flows(request.model_dump(exclude_unset=True),
                                                         lambda_context=app.lambda_context))


@app.post("/flows/normalize")
def flows_normalize(request: NormalizeRequest) -> Response[str]:
    from compactor import service

    return _billed("flows_normalize", lambda: service.handle_flows_normalize(request.model_dump(exclude_unset=True)),
                   mode="none")


app.include_router(jobs_routes.router)  # POST /uploads, GET /jobs/{id} (docs/scale.md)
openapi.register(app)  # GET /openapi.json (docs/api.md)


@app.exception_handler([RequestValidationError, RequestUnsupportedContentType])
def _invalid_request(error: RequestValidationError | RequestUnsupportedContentType) -> Response[str]:
    return _json(422, http_api.validation_detail(error.errors()))


@app.not_found
def _not_found(_: NotFoundError) -> Response[str]:
    return _json(404, http_api.not_found_body(app.current_event.http_method, app.current_event.path))


@app.exception_handler(Exception)
def _unexpected(error: Exception) -> Response[str]:
    # Type and frames locate the failure; the message is left out, it may quote a request or a provider.
    logger.error("unhandled %s", type(error).__name__, extra={"frames": traceback.format_tb(error.__traceback__)})
    return _json(500, http_api.internal_error_body())


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Answer one API Gateway REST proxy event; oversized bodies get 413 before any parsing."""
    if http_api.event_body_size(event) > http_api.MAX_BODY_BYTES:
        response = http_api.proxy_response(413, http_api.too_large_body())
    else:
        response = http_api.bounded_response(app.resolve(event, context))
    observability.record_request(metrics, int(response["statusCode"]))
    return response
