"""The one error hierarchy: status, type and code are properties of the error; one envelope."""

from __future__ import annotations

import pytest

from compactor import errors


@pytest.mark.parametrize(("error", "status", "type_", "code"), [
    (errors.InvalidRequest("m"), 400, "invalid_request_error", None),
    (errors.InvalidPolicy.rejected("bad"), 400, "invalid_request_error", "invalid_policy"),
    (errors.InvalidFlow.rejected("bad"), 400, "invalid_request_error", "invalid_flow"),
    (errors.InvalidTranscript("m"), 422, "invalid_request_error", "invalid_transcript"),
    (errors.NotFound.route("GET", "/x"), 404, "invalid_request_error", "not_found"),
    (errors.LengthRequired("m"), 411, "invalid_request_error", None),
    (errors.RequestTooLarge.over(10), 413, "invalid_request_error", "request_too_large"),
    (errors.InternalError(), 500, "server_error", None),
    (errors.RouterError("m", "exhausted: rate_limit"), 429, "router_error", "exhausted: rate_limit"),
    (errors.RouterError("m", "node_exception"), 502, "router_error", "node_exception"),
])
def test_status_type_and_code_belong_to_the_error(error: errors.CompactorError, status: int, type_: str,
                                                 code: str | None) -> None:
    assert isinstance(error, errors.CompactorError)
    answered_status, body = error.answer()
    assert answered_status == error.status == status
    assert body == {"error": {"message": error.message, "type": type_, "code": code}}


def test_an_admission_reason_is_echoed_at_most_so_far() -> None:
    """A reason quotes what the caller sent: a 4 MB value is not sent back whole."""
    reason = "question " + "q" * 4_000_000 + " must be an object"
    message = errors.InvalidPolicy.rejected(reason).message
    prefix = "policy_ir rejected at admission: "
    assert message.startswith(prefix + "question qqq") and message.endswith("…")
    assert len(message) == len(prefix) + errors.ADMISSION_REASON_MAX_CHARS
    assert errors.InvalidFlow.rejected("x" * errors.ADMISSION_REASON_MAX_CHARS).message.endswith("x")  # at the bound


def test_messages_and_extra_keys() -> None:
    assert errors.InvalidPolicy.rejected("x").message == "policy_ir rejected at admission: x"
    assert errors.InvalidFlow.rejected("y").message == "flow_ir rejected at admission: y"
    assert errors.NotFound.route("GET", "/x").message == "no route for GET /x"
    assert errors.RequestTooLarge.over(10).message == "request body exceeds 10 bytes"
    body = errors.RouterError("failed", "timeout", extra={"x_router": {"a": 1}}).body()
    assert list(body) == ["error", "x_router"] and body["x_router"] == {"a": 1}


def _classes(base: type[errors.CompactorError]) -> list[type[errors.CompactorError]]:
    return [base, *(found for sub in base.__subclasses__() for found in _classes(sub))]


def test_every_coded_refusal_is_in_the_documented_table() -> None:
    """docs/behaviour.md#errors lists every refusal the service decides: each error class with a code of its own
    has its row (status, type, code)."""
    from pathlib import Path

    table = (Path(__file__).resolve().parents[2] / "docs" / "behaviour.md").read_text(encoding="utf-8")
    missing = [cls.__name__ for cls in _classes(errors.CompactorError)
               if isinstance(cls.code, str) and f"| {cls.status} | `{cls.type}` | `{cls.code}` |" not in table]
    assert missing == []
