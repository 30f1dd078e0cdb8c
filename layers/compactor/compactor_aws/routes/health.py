"""``GET /v1/healthz``."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from compactor_aws.routes.common import json_response, route

router = APIGatewayRouter()


@route(router, "GET", "/healthz")
def healthz() -> Response[str]:
    from compactor import service

    return json_response(*service.health())
