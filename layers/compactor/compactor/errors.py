"""Every error the service answers with, as one exception hierarchy (see docs/behaviour.md, "Errors").

Each class fixes the HTTP ``status``, the envelope ``type`` and ``code`` of its answers; an instance
carries the client-facing message and renders the envelope ``{"error": {"message", "type", "code"}}``
with :meth:`CompactorError.body`. The core raises these; the front doors (Lambda routes, the local
server, the CLI, the S3 job) turn them into answers. The 422 validation answer has its own shape
(``{"detail": [...]}``, see ``compactor.http_api.validation_detail``) and is not one of these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pydantic import ValidationError

ADMISSION_PREFIX = "rejected at admission: "
# An admission reason quotes what the caller sent (node ids, kinds, question names, values): an answer echoes at
# most this much of it. Until issue 11's sixteenth round a flow whose 4 MB node id failed admission was answered
# with that id in a 4 MB message.
ADMISSION_REASON_MAX_CHARS = 1000

RETRY_AFTER = "Retry-After"
"""The header of an answer that asks the caller to try again later: how many seconds to wait, a whole number (RFC
9110's delay-seconds; docs/behaviour.md#retry-after). Every front door sends what :meth:`CompactorError.headers`
gives."""
RETRY_LATER_S = 5
"""The wait a ``Retry-After`` asks for when the service itself holds the answer back: the first request with the
same ``Idempotency-Key`` still runs (at most the flow budget, 40 s, and the function's 60 s timeout; most compactions
end within seconds, so a retry every 5 s meets the stored answer soon after it is there, at a dozen requests at
most), or the idempotency store cannot be reached (docs/billing.md)."""


def retry_after_headers(seconds: float | None) -> dict[str, str]:
    """``{"Retry-After": …}`` asking for ``seconds`` rounded up to a whole second (at least 1: a provider's 0.2 s is
    not "now"), or no header when ``seconds`` is None."""
    return {} if seconds is None else {RETRY_AFTER: str(max(1, math.ceil(seconds)))}


class CompactorError(Exception):
    """Base of the hierarchy: a 400 ``invalid_request_error`` without a code."""

    status: ClassVar[int] = 400
    type: ClassVar[str] = "invalid_request_error"
    code: ClassVar[str | None] = None
    retry_after_s: ClassVar[float | None] = None  # an answer that asks to retry later: its Retry-After

    def __init__(self, message: str, *, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra: dict[str, Any] = dict(extra or {})  # top-level keys next to "error" (x_router)

    def body(self) -> dict[str, Any]:
        """The JSON answer: the envelope, then any extra top-level keys."""
        return {"error": {"message": self.message, "type": self.type, "code": self.code}, **self.extra}

    def answer(self) -> tuple[int, dict[str, Any]]:
        return self.status, self.body()

    def headers(self) -> dict[str, str]:
        """The answer's headers besides ``Content-Type``: ``Retry-After`` when it asks to retry later."""
        return retry_after_headers(self.retry_after_s)


class InvalidRequest(CompactorError):
    """A request the service understands but refuses (400, no code)."""


class InvalidEvent(InvalidRequest):
    """The API function's event is not an API Gateway REST proxy event it can read: a hand-made or test invoke,
    another integration's payload (``compactor.http_api.well_formed_event``; docs/reliability.md#bounded-input)."""

    code = "invalid_event"


class AmbiguousApiKey(InvalidRequest):
    """The request presents two different API keys (RFC 6750's ``invalid_request``: more than one method, or
    the same field repeated, for one credential): no key is taken (docs/billing.md#bearer-keys)."""

    code = "ambiguous_api_key"
    MESSAGE: ClassVar[str] = ("the request presents more than one API key (x-api-key twice, Authorization: Bearer "
                              "twice, or both with different keys): send one key")

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message)


class KeyTooLong(InvalidRequest):
    code = "key_too_long"  # S3 path: compacted/<rel> would pass S3's longest key


class InvalidMaxTokens(InvalidRequest):
    code = "invalid_max_tokens"


class RestorableUnavailable(InvalidRequest):
    code = "restorable_unavailable"  # ``restorable`` in a mode that keeps no originals (docs/archives.md)


class AdmissionRejected(InvalidRequest):
    """A policy or flow term failed admission; ``field`` names the request field it came from."""

    field: ClassVar[str]

    @classmethod
    def rejected(cls, reason: object) -> AdmissionRejected:
        text = str(reason)
        if len(text) > ADMISSION_REASON_MAX_CHARS:
            text = text[:ADMISSION_REASON_MAX_CHARS - 1] + "…"
        return cls(f"{cls.field} {ADMISSION_PREFIX}{text}")


class InvalidPolicy(AdmissionRejected):
    field, code = "policy_ir", "invalid_policy"


class InvalidFlow(AdmissionRejected):
    field, code = "flow_ir", "invalid_flow"  # an operator's flow or the materialised compaction preset


class Unprocessable(CompactorError):
    """422: the request is well-formed JSON but its content cannot be used."""

    status = 422


class InvalidTranscript(Unprocessable):
    code = "invalid_transcript"  # S3 path: the uploaded object is not a transcript

    FIELDS_FAILED: ClassVar[str] = "the transcript's request fields failed validation"  # inline and windowed jobs


class IdempotencyKeyReused(Unprocessable):
    code = "idempotency_key_reused"  # the same Idempotency-Key came with another body


class InvalidUsageRange(Unprocessable):
    code = "invalid_usage_range"


class InvalidIdempotencyKey(CompactorError):
    code = "invalid_idempotency_key"


class IdempotencyInProgress(CompactorError):
    status, code = 409, "idempotency_in_progress"
    retry_after_s = RETRY_LATER_S


class IdempotencyUnavailable(CompactorError):
    status, type, code = 503, "server_error", "idempotency_unavailable"
    retry_after_s = RETRY_LATER_S


class UploadsUnavailable(CompactorError):
    status, type, code = 503, "server_error", "uploads_unavailable"


class NotFound(CompactorError):
    status = 404
    code = "not_found"

    @classmethod
    def route(cls, method: str, path: str) -> NotFound:
        return cls(f"no route for {method} {path}")


class JobExpired(CompactorError):
    status, code = 410, "job_expired"  # an upload job past the deployment's retention of its data (docs/scale.md)


class MethodNotAllowed(CompactorError):
    status, code = 405, "method_not_allowed"  # the path has routes, none for this method (with an Allow header)

    @classmethod
    def route(cls, method: str, path: str, allowed: list[str]) -> MethodNotAllowed:
        return cls(f"{method} is not allowed on {path}; allowed: {', '.join(allowed)}")


class UnknownHandle(NotFound):
    type, code = "not_found_error", "unknown_handle"  # the same answer for unknown and foreign handles


class LengthRequired(CompactorError):
    status = 411


class MalformedRequest(CompactorError):
    """``compactor serve``: a request its HTTP layer refuses before any route reads it, with the status that layer
    chose (400 a malformed request line, 414 one too long, 431 header lines too long or too many, 505 an HTTP version
    it does not speak)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.http_status = status

    def body(self) -> dict[str, Any]:
        kind = "server_error" if self.http_status >= 500 else self.type
        return {"error": {"message": self.message, "type": kind, "code": self.code}}

    def answer(self) -> tuple[int, dict[str, Any]]:
        return self.http_status, self.body()


class RequestTooLarge(CompactorError):
    status = 413
    code = "request_too_large"

    @classmethod
    def over(cls, limit: int) -> RequestTooLarge:
        return cls(f"request body exceeds {limit} bytes")


class UnsupportedMediaType(CompactorError):
    status, code = 415, "unsupported_media_type"  # a body that is not plain JSON (docs/behaviour.md#errors)

    @classmethod
    def content_type(cls, value: str) -> UnsupportedMediaType:
        return cls(f"Content-Type {_quoted(value)} is not supported: send the body as application/json")

    @classmethod
    def charset(cls, value: str) -> UnsupportedMediaType:
        return cls(f"Content-Type {_quoted(value)} is not supported: send the body as UTF-8 (application/json)")

    @classmethod
    def content_encoding(cls, value: str) -> UnsupportedMediaType:
        return cls(f"Content-Encoding {_quoted(value)} is not supported: send the body uncompressed")

    @classmethod
    def undeclared(cls) -> UnsupportedMediaType:
        return cls("the body has no Content-Type: send it as application/json")


class CrossSiteRequest(CompactorError):
    """403 from ``compactor serve``: a request another site's page made the browser send (docs/behaviour.md#errors)."""

    status, code = 403, "cross_site_request"

    @classmethod
    def site(cls, value: str) -> CrossSiteRequest:
        return cls(f"a {_quoted(value)} request (Sec-Fetch-Site) from a browser: only this server's own pages may "
                   "send one")

    @classmethod
    def origin(cls, value: str) -> CrossSiteRequest:
        return cls(f"Origin {_quoted(value)} is not this server's: only its own pages may send this request")

    @classmethod
    def host(cls, value: str) -> CrossSiteRequest:
        return cls(f"Host {_quoted(value)} is not a local name or an IP address: call the server by its address "
                   "(127.0.0.1, localhost), or start it with --api-key")


def _quoted(value: str, limit: int = 100) -> str:
    """``value`` (a header a caller sent) quoted, at most ``limit`` characters of it."""
    return repr(value if len(value) <= limit else value[:limit - 1] + "…")


class ResponseTooLarge(CompactorError):
    status, code = 413, "response_too_large"  # the answer would not fit a Lambda response

    @classmethod
    def over(cls, limit: int) -> ResponseTooLarge:
        return cls(f"the answer would exceed the {limit}-byte response limit; send large transcripts "
                   "through the S3 path")


class InternalError(CompactorError):
    """500: says nothing about the failure's internals."""

    status = 500
    type = "server_error"

    def __init__(self, message: str = "internal server error", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)


class JobFailed(InternalError):
    """500: an S3 object's job that ended without a result (docs/scale.md), recorded under ``failed/<rel>``."""

    code = "job_failed"


class RouterError(CompactorError):
    """A routed model call or flow failed without a fallback; the status follows the error kind."""

    type = "router_error"
    _STATUS_BY_KIND: ClassVar[Mapping[str, int]] = {
        "no_candidates": 503,
        "timeout": 504,
        "flow_deadline": 504,
        "bad_request": 400,
        "context_overflow": 400,
        "auth_error": 401,
        "rate_limit": 429,
        # A data operation that does not fit the data it is given: the caller's flow or input is at fault,
        # so 422 where the reference answers 502 (docs/differences.md).
        "data_error": 422,
    }
    _EXHAUSTED_PREFIX: ClassVar[str] = "exhausted: "

    def __init__(self, message: str, kind: str | None, *, retry_after_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.kind = kind
        self.provider_retry_after_s = retry_after_s  # the provider's Retry-After of the failure that ended the call

    @classmethod
    def status_of(cls, kind: str | None) -> int:
        """HTTP status of an error kind (``exhausted: <kind>`` maps like ``<kind>``); 502 otherwise."""
        return cls._STATUS_BY_KIND.get((kind or "").removeprefix(cls._EXHAUSTED_PREFIX), 502)

    @property
    def status(self) -> int:  # type: ignore[override]
        return self.status_of(self.kind)

    @property
    def code(self) -> str | None:  # type: ignore[override]
        return self.kind

    @property
    def retry_after_s(self) -> float | None:  # type: ignore[override]
        """The provider's ``Retry-After`` (``compactor.router.RouteResult.retry_after_s``), passed on with a 429 or a
        5xx; none with a status a retry does not change (400, 401, 422), nor without the provider's word: the service
        has no wait of its own to offer (docs/behaviour.md#retry-after)."""
        status = self.status
        return self.provider_retry_after_s if status == 429 or status >= 500 else None


_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def validation_words(message: str) -> str:
    """A validation problem's ``msg`` in the service's own words: without the ``Value error, `` or
    ``Assertion failed, `` pydantic writes before what a validator raised (docs/behaviour.md)."""
    for prefix in _PYDANTIC_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def describe_validation(error: ValidationError, most: int = 5,
                        located: Callable[[tuple[Any, ...]], str] | None = None) -> str:
    """A validation error in one line for a person: ``where: what`` for each of its first ``most``
    problems, without pydantic's echo of the input and its documentation links (a catalog's, the CLI's
    request); ``located`` writes a problem's location (``where``) when the parts joined by dots are not enough."""
    problems = []
    for item in error.errors(include_url=False):
        where = located(item["loc"]) if located else ".".join(str(part) for part in item["loc"])
        # pydantic's own words for a value that is no object name the model's class (``… or instance of
        # CatalogSpec``), which the person wrote no part of: a catalog file holding a JSON array said so
        message = "Input should be a JSON object" if item["type"] == "model_type" else validation_words(item["msg"])
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems[:most]) + (f" (and {len(problems) - most} more)" if len(problems) > most else "")
