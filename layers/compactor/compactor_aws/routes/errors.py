"""How the API answers what no route answers: invalid bodies (422), unknown routes (404), errors of
the core's hierarchy (``compactor.errors``) and anything unexpected (500, without internals)."""

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
from compactor.errors import CompactorError, InternalError, NotFound
from compactor_aws.routes.common import json_response, logger

router = APIGatewayRouter()


@router.exception_handler([RequestValidationError, RequestUnsupportedContentType])
def invalid_request(error: RequestValidationError | RequestUnsupportedContentType) -> Response[str]:
    return json_response(422, http_api.validation_detail(error.errors()))


@router.exception_handler(NotFoundError)
def not_found(_: NotFoundError) -> Response[str]:
    return json_response(*NotFound.route(router.current_event.http_method, router.current_event.path).answer())


@router.exception_handler(CompactorError)
def refused(error: CompactorError) -> Response[str]:
    return json_response(*error.answer())


@router.exception_handler(Exception)
def unexpected(error: Exception) -> Response[str]:
    # Type and frames locate the failure; the message is left out, it may quote a request or a provider.
    logger.error("unhandled %s", type(error).__name__, extra={"frames": traceback.format_tb(error.__traceback__)})
    return json_response(*InternalError().answer())
