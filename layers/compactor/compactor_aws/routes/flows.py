"""``POST /v1/flows`` (run an operator's flow) and ``POST /v1/flows/normalize`` (admission only)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from compactor.call_record import FLOW_MODE
from compactor.models import FlowsRequest, NormalizeRequest
from compactor_aws.routes.common import billed, billed_post

router = APIGatewayRouter()


@billed_post(router, "/flows")
def flows(request: FlowsRequest) -> Response[str]:
    from compactor import service

    return billed(router, "flows", lambda: service.handle_flows(request.model_dump(exclude_unset=True),
                                                                lambda_context=router.lambda_context),
                  mode=FLOW_MODE)


@billed_post(router, "/flows/normalize")
def flows_normalize(request: NormalizeRequest) -> Response[str]:
    from compactor import service

    return billed(router, "flows_normalize",
                  lambda: service.handle_flows_normalize(request.model_dump(exclude_unset=True)))
