"""What every route shares: the Powertools logger, metrics and tracer of the API function, the JSON
response, and :func:`billed` (idempotent replay, metrics, billing record and traces of one call)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from compactor import http_api
from compactor.call_record import CallRecord
from compactor.jsonutil import dense_dumps
from compactor_aws import observability

# The template sets these names; the defaults keep `compactor serve` and tests working without them.
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "compactor"))
tracer = observability.new_tracer()  # no X-Ray SDK where tracing is off
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Compactor"))


def json_response(status: int, body: Any) -> Response[str]:
    return Response(status_code=status, content_type=http_api.JSON_CONTENT_TYPE, body=dense_dumps(body))


def billed(router: Router, route: str, run: Callable[[], CallRecord]) -> Response[str]:
    """The call's response, replayed under its Idempotency-Key or computed by ``run`` (then observed:
    metrics, billing record, flow-node subsegments), billed once (docs/billing.md)."""
    from compactor_aws import billing

    answer = billing.answer_observed(router.current_event.raw_event, route, run, lambda_context=router.lambda_context,
                                     logger=logger, metrics=metrics, tracer=tracer)
    return Response(status_code=answer.status, content_type=http_api.JSON_CONTENT_TYPE, body=answer.body,
                    headers=answer.headers)
