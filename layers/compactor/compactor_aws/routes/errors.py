"""How the API answers what no route answers: invalid bodies (422), unknown routes (404), a method a path
has no route for (405 with ``Allow``; ``OPTIONS`` 204 with ``Allow``), errors of the core's hierarchy
(``compactor.errors``) and anything unexpected (500, without internals)."""

from __future__ import annotations

import traceback

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from compactor import http_api
from compactor.errors import CompactorError, InternalError, MethodNotAllowed, NotFound
from compactor.jsonutil import dense_dumps
from compactor_aws.routes.common import error_response, json_response, logger, methods_at

router = APIGatewayRouter()


@router.exception_handler([RequestValidationError, RequestUnsupportedContentType])
def invalid_request(error: RequestValidationError | RequestUnsupportedContentType) -> Response[str]:
    return json_response(422, http_api.validation_detail(error.errors()))


def allowed_methods(path: str) -> list[str]:
    """The methods the API answers at ``path`` (without the stage prefix), sorted: those of its routes
    (``compactor_aws.routes.common.ROUTES``), ``HEAD`` wherever ``GET`` (the handler answers it as the ``GET``),
    and ``OPTIONS``; empty when no route has the path."""
    methods = methods_at(path)
    if not methods:
        return []
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods | {"OPTIONS"})


@router.exception_handler(NotFoundError)
def not_found(_: NotFoundError) -> Response[str]:
    """404 for a path no route has; for a path with routes, none of them for this method, 405 with ``Allow``
    (RFC 9110; it used to be the 404 ``no route for``, which reads as a wrong path), and ``OPTIONS`` 204 with
    ``Allow`` (docs/behaviour.md#errors). Both name the path as the caller sent it (:func:`http_api.sent_path`)."""
    event = router.current_event
    method, path = event.http_method, http_api.sent_path(event.raw_event)
    allowed = allowed_methods(http_api.route_path(event.path))
    if not allowed:
        return json_response(*NotFound.route(method, path).answer())
    headers = {"Allow": ", ".join(allowed)}
    if method == "OPTIONS":
        return Response(status_code=204, content_type=None, body="", headers=headers)
    status, body = MethodNotAllowed.route(method, path, allowed).answer()
    return Response(status_code=status, content_type=http_api.JSON_CONTENT_TYPE, body=dense_dumps(body),
                    headers=headers)


@router.exception_handler(CompactorError)
def refused(error: CompactorError) -> Response[str]:
    return error_response(error)


@router.exception_handler(Exception)
def unexpected(error: Exception) -> Response[str]:
    # Type and frames locate the failure; the message is left out, it may quote a request or a provider. A catalog
    # that cannot be loaded is the operator's configuration (its path and the problem, docs/providers.md), logged
    # whole: the line said "unhandled CatalogError" alone, while every compaction answered 500.
    from compactor.catalog import CatalogError

    extra = {"frames": traceback.format_tb(error.__traceback__)}
    if isinstance(error, CatalogError):
        extra["error"] = str(error)
    logger.error("unhandled %s", type(error).__name__, extra=extra)
    return json_response(*InternalError().answer())
