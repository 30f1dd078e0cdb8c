"""Lambda handler of ``CompactApi``: the Powertools resolver with the routes of
``compactor_aws.routes`` included (one module per topic; see docs/architecture.md).

API Gateway delivers ``/v1/compact`` on stage ``v1`` with ``path`` ``/compact``, so the routes carry no
stage prefix; ``/v1`` is also stripped when a custom domain passes it through. POST routes are billed
through ``compactor_aws.billing`` and ``GET /usage`` reads it (docs/billing.md).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import container, http_api
from compactor.caller import caller_of, calling_as
from compactor.errors import CompactorError
from compactor_aws import observability, snapstart
from compactor_aws.routes import archives, compact, errors, flows, health, jobs, usage
from compactor_aws.routes.common import logger, metrics, route, tracer

snapstart.register()  # warm the core before a SnapStart snapshot (docs/performance.md)

# Bodies are parsed within depth and number-size limits: a violation is the 422 json_invalid (docs/reliability.md).
app = APIGatewayRestResolver(enable_validation=True, strip_prefixes=[http_api.STAGE_PREFIX],
                             json_body_deserializer=http_api.request_body_loads)
app.include_router(health.router)
app.include_router(compact.router)
app.include_router(archives.router)  # POST /expand (docs/archives.md)
app.include_router(flows.router)
app.include_router(usage.router)
app.include_router(jobs.router)  # POST /uploads, GET /jobs/{id} (docs/scale.md)
app.include_router(errors.router)


@route(app, "GET", "/openapi.json", include_in_schema=False)  # left out of the document itself
def openapi_json() -> Response[str]:
    """The API's OpenAPI document (docs/api.md); its models load on this route's first call only."""
    from compactor_aws.openapi import document_text

    return Response(status_code=200, content_type=http_api.JSON_CONTENT_TYPE, body=document_text(app))


def head_as_get(event: dict[str, Any]) -> dict[str, Any]:
    """``event``, or for a ``HEAD`` of a path with a ``GET`` route, that ``GET``: its answer, headers and status
    included, is the ``HEAD``'s (RFC 9110; the front door leaves the body out). It used to be a 404."""
    if event.get("httpMethod") != "HEAD":
        return event
    if "GET" not in errors.allowed_methods(http_api.route_path(event.get("path") or "/")):
        return event
    return {**event, "httpMethod": "GET"}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Answer one API Gateway REST proxy event; an oversized or undecodable body is refused before any parsing."""
    try:
        admitted = http_api.admitted_event(event)
    except CompactorError as refused:
        response = http_api.proxy_response(*refused.answer())
    else:
        # The router keeps this caller's failures to this caller's routing (docs/reliability.md).
        with calling_as(caller_of(admitted)):
            response = http_api.bounded_response(app.resolve(head_as_get(admitted), context))
    observability.record_request(metrics, int(response["statusCode"]))
    return response


container.freeze_init_objects()  # the last line of init: what it loaded is no longer scanned by the collector
