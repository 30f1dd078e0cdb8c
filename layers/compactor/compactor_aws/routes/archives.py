"""``POST /v1/expand``: a caller's restorable originals by handle (docs/archives.md), and the caller's
archive that ``POST /v1/compact`` fills for a ``restorable`` request."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from compactor.models import ExpandRequest
from compactor_aws.routes.common import billed, billed_post

router = APIGatewayRouter()


def caller_archive(current: APIGatewayRouter) -> Any:
    """The archive of the caller of ``current``'s event (``compactor.archives.Archive``)."""
    from compactor.archives import Archive
    from compactor_aws.archive_store import configured_store
    from compactor_aws.caller import caller_of

    return Archive(configured_store(), caller_of(current.current_event.raw_event))


@billed_post(router, "/expand")
def expand(request: ExpandRequest) -> Response[str]:
    from compactor import service

    return billed(router, "expand", lambda: service.handle_expand(request.handles, archive=caller_archive(router)))
