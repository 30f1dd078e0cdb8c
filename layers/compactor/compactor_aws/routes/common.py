"""What every route shares: the Powertools logger, metrics and tracer of the API function, the table of routes
(:func:`route`), the JSON response, and :func:`billed` (idempotent replay, metrics, billing record and traces of
one call)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from compactor import http_api
from compactor.call_record import NO_MODE, CallRecord
from compactor.errors import CompactorError
from compactor.jsonutil import dense_dumps
from compactor_aws import logs, observability

# The template sets these names; the defaults keep `compactor serve` and tests working without them.
logger = logs.new_logger()  # the layer's module loggers write through it
tracer = observability.new_tracer()  # no X-Ray SDK where tracing is off
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Compactor"),
                  service=logger.service)  # dimension service, also where POWERTOOLS_SERVICE_NAME is unset


RouteFunction = TypeVar("RouteFunction", bound=Callable[..., Any])

ROUTES: dict[str, set[str]] = {}
"""Every route of the API: its path as Powertools' rule names it (no stage prefix, ``<name>`` for a path
parameter) → its methods. Filled by :func:`route` as the route modules are imported; the ``Allow`` of a 405 and of
an ``OPTIONS`` answer and the ``HEAD`` of a ``GET`` route are read from it (``compactor_aws.routes.errors``), never
from Powertools' own route tables, which have no public view (a release could rename them)."""


def route(router: Router, method: str, path: str, **options: Any) -> Callable[[RouteFunction], RouteFunction]:
    """``router.route(path, method, **options)``, the route entered in :data:`ROUTES`: every route is declared
    through here (``router`` may be the resolver itself)."""
    ROUTES.setdefault(path, set()).add(method)
    return cast(Callable[[RouteFunction], RouteFunction], router.route(path, method, **options))


def methods_at(path: str) -> set[str]:
    """The methods of the routes whose rule matches ``path`` (without the stage prefix), matched as the resolver
    matches it: by the pattern Powertools compiles from the rule (:func:`_rule_pattern`). The rule's segments used to
    be compared here, a ``<name>`` segment taking any one non-empty segment; Powertools' takes only its URI
    characters (no ``"``, no control character), so ``GET /v1/jobs/a%22b`` was answered 405 "GET is not allowed ...;
    allowed: GET, HEAD, OPTIONS" instead of 404."""
    return {method for rule, methods in ROUTES.items() if _rule_pattern(rule).match(path) for method in methods}


@functools.cache
def _rule_pattern(rule: str) -> re.Pattern[str]:
    """The pattern the REST resolver routes ``rule`` by (a ``<name>`` segment, trailing slashes)."""
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver

    return cast(re.Pattern[str], APIGatewayRestResolver._compile_regex(rule))


BILLED_ROUTES: set[tuple[str, str]] = set()
"""The billed routes, ``(method, path)`` as the OpenAPI document names them: the ones that take an
``Idempotency-Key`` (docs/billing.md). Filled by :func:`billed_post` as the route modules are imported; the
OpenAPI document reads it (``compactor_aws.openapi``), so the routes and their document cannot disagree."""


def billed_post(router: Router, path: str) -> Callable[[RouteFunction], RouteFunction]:
    """``router.post(path)`` for a route that answers through :func:`billed`, registered in :data:`BILLED_ROUTES`."""
    BILLED_ROUTES.add(("post", path))
    return route(router, "POST", path)


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(status_code=status, content_type=http_api.JSON_CONTENT_TYPE, body=dense_dumps(body),
                    headers=headers or None)


def error_response(error: CompactorError) -> Response[str]:
    """The answer of an error of the core's hierarchy, with its headers (``Retry-After``)."""
    return json_response(*error.answer(), headers=error.headers())


def billed(router: Router, route: str, run: Callable[[], CallRecord], mode: str = NO_MODE) -> Response[str]:
    """The call's response, replayed under its Idempotency-Key or computed by ``run`` (then observed:
    metrics, billing record, flow-node subsegments; in ``mode`` with the status it is answered, should ``run``
    raise), billed once (docs/billing.md). The route is declared with :func:`billed_post`."""
    from compactor_aws import billing

    answer = billing.answer_observed(router.current_event.raw_event, route, run, lambda_context=router.lambda_context,
                                     logger=logger, metrics=metrics, tracer=tracer, mode=mode)
    return Response(status_code=answer.status, content_type=http_api.JSON_CONTENT_TYPE, body=answer.body,
                    headers=answer.headers)
