"""The core's entry points for every front door (Lambda handler, local server, CLI).

Each returns ``(status, body)``; the adapters only translate events to calls and back.
"""

from __future__ import annotations

from typing import Any

from . import __version__
from .models import CompactRequest


def health() -> dict[str, Any]:
    return {"ok": True, "version": __version__}


def handle_compact(request: CompactRequest, *, lambda_context: Any = None) -> tuple[int, dict[str, Any]]:
    """``POST /v1/compact`` (both modes). (Being implemented: returns the no-op body for now.)"""
    return 200, {"messages": request.messages, "compacted": False}


def handle_flows(body: dict[str, Any], *, lambda_context: Any = None) -> tuple[int, dict[str, Any]]:
    """``POST /v1/flows``. (Wired when the flow runtime lands.)"""
    return 501, {"error": {"message": "not implemented yet", "type": "server_error", "code": None}}


def handle_flows_normalize(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``POST /v1/flows/normalize``. (Wired when the flow runtime lands.)"""
    return 501, {"error": {"message": "not implemented yet", "type": "server_error", "code": None}}
