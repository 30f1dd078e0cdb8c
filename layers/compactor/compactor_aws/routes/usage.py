"""``GET /v1/usage``: the caller's own totals per day (docs/billing.md)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from compactor_aws.routes.common import json_response, route

router = APIGatewayRouter()


@route(router, "GET", "/usage")
def usage() -> Response[str]:
    from compactor_aws import billing

    return json_response(*billing.usage_answer(router.current_event.raw_event))
