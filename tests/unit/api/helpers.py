"""Helpers for handler tests: API Gateway events from tests/events and response accessors."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str, *, body: Any = ..., raw_body: str | None = None, base64_body: bytes | None = None,
               headers: dict[str, str] | None = None, path: str | None = None,
               method: str | None = None) -> dict[str, Any]:
    """A copy of ``tests/events/<name>.json`` with the body, headers, path (``requestContext.path`` too) or method
    replaced."""
    event = copy.deepcopy(json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8")))
    if body is not ...:
        event["body"] = json.dumps(body)
    if raw_body is not None:
        event["body"] = raw_body
    if base64_body is not None:
        event["body"], event["isBase64Encoded"] = base64.b64encode(base64_body).decode("ascii"), True
    for name_, value in (headers or {}).items():
        event["headers"][name_] = value
        event["multiValueHeaders"][name_] = [value]
    if path is not None:
        event["path"] = event["resource"] = event["requestContext"]["resourcePath"] = path
        # What API Gateway puts in requestContext.path, the path the caller sent: the execute-api URL's event has the
        # path without the stage and this with it; a custom domain passing /v1 through has it in both.
        staged = path == "/v1" or path.startswith("/v1/")
        event["requestContext"]["path"] = path if staged else f"/v1{path}"
    if method is not None:
        event["httpMethod"] = event["requestContext"]["httpMethod"] = method
    return event


def response_json(response: dict[str, Any]) -> Any:
    assert response["isBase64Encoded"] is False
    return json.loads(response["body"])


def content_type(response: dict[str, Any]) -> str:
    headers = {key.lower(): value for key, value in (response.get("headers") or {}).items()}
    for key, values in (response.get("multiValueHeaders") or {}).items():
        headers[key.lower()] = values[-1]
    return headers["content-type"]
