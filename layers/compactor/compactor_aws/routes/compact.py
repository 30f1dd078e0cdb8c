"""``POST /v1/compact``: one call into ``compactor.service`` (imported on first use: lean cold starts)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from compactor.models import CompactRequest
from compactor_aws.routes.archives import caller_archive
from compactor_aws.routes.common import billed, billed_post

router = APIGatewayRouter()


@billed_post(router, "/compact")
def compact(request: CompactRequest) -> Response[str]:
    from compactor import service
    from compactor_aws.stepfunctions_runner import configured_runner  # None unless BatchFanOut=stepfunctions

    return billed(router, "compact", lambda: service.handle_compact(
        request, lambda_context=router.lambda_context, flow_runner=configured_runner(),
        archive=caller_archive(router) if request.restorable else None),  # docs/archives.md
        mode=request.mode_name)
