"""HTTP conventions shared by the front doors (the Lambda handler and ``compactor serve``).

Limits, the JSON error bodies of docs/behaviour.md#requests-and-responses, and the API Gateway REST (v1 proxy) shapes: the event
the deployed function receives and the response it returns. Pure Python, no AWS imports.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from compactor.jsonutil import JSONLimitError, bounded_loads, dense_dumps

MAX_BODY_BYTES = 10 * 1024 * 1024
"""Largest request body accepted (bytes, after base64 decoding); larger bodies get 413."""

MAX_RESPONSE_BYTES = 6 * 1024 * 1024 - 16 * 1024
"""Largest response body the API function returns: Lambda refuses payloads over 6 MB (API Gateway then
answers 502), and the proxy envelope and headers need room too."""

STAGE = "v1"
"""API Gateway stage: the public path of a route is ``/<stage><resource>`` (``/v1/compact``)."""

STAGE_PREFIX = f"/{STAGE}"
"""Stripped from a path before routing: a custom domain may pass the stage through (``/v1/compact``)."""

JSON_CONTENT_TYPE = "application/json"
FORBIDDEN_BODY: dict[str, Any] = {"message": "Forbidden"}
"""What API Gateway answers (403) when a required API key is missing or wrong."""

_SCALARS = (str, int, float, bool, type(None))
MAX_DETAIL_ITEMS = 20
"""Most validation errors a 422 lists (``detail_omitted`` counts the others)."""
MAX_DETAIL_TEXT = 200
"""Longest string (location part, context value) a 422 detail item carries."""
MAX_DETAIL_MSG = 400
"""Longest message a 422 detail item carries: the service's own words with their advice (a refusal naming the first
item of each of three formats runs past 300 characters), still bounded whatever the body."""
MAX_DETAIL_LOC = 16


def bounded_response(response: dict[str, Any]) -> dict[str, Any]:
    """``response``, or a 413 when its body would exceed :data:`MAX_RESPONSE_BYTES` (docs/reliability.md)."""
    from compactor.errors import ResponseTooLarge

    body = response.get("body") or ""
    if len(body) * 4 <= MAX_RESPONSE_BYTES or len(body.encode("utf-8", "surrogatepass")) <= MAX_RESPONSE_BYTES:
        return response
    return proxy_response(*ResponseTooLarge.over(MAX_RESPONSE_BYTES).answer())


def validation_detail(errors: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """422 body in FastAPI's shape, ``{"detail": [{"type", "loc", "msg", "ctx"?}]}``, each ``msg`` in the
    service's words (:func:`~compactor.errors.validation_words`).

    The offending ``input`` is left out: it can be the whole (large) request body. At most
    :data:`MAX_DETAIL_ITEMS` items are listed, each message cut to :data:`MAX_DETAIL_MSG` characters and each other
    string to :data:`MAX_DETAIL_TEXT`;
    ``detail_omitted`` counts the rest, so a 422 stays small whatever the body (docs/reliability.md).
    """
    from compactor.errors import validation_words

    detail = []
    omitted = 0
    for error in errors:
        if len(detail) >= MAX_DETAIL_ITEMS:
            omitted += 1
            continue
        item: dict[str, Any] = {
            "type": _cut(error.get("type", "value_error")),
            "loc": [_cut(part) for part in list(error.get("loc", ()))[:MAX_DETAIL_LOC]],
            "msg": _cut(validation_words(error.get("msg", "invalid value")), MAX_DETAIL_MSG),
        }
        ctx = error.get("ctx")
        if ctx:
            item["ctx"] = {_cut(key): _cut(value if isinstance(value, _SCALARS) else str(value))
                           for key, value in list(ctx.items())[:MAX_DETAIL_LOC]}
        detail.append(item)
    return {"detail": detail, "detail_omitted": omitted} if omitted else {"detail": detail}


def _cut(value: Any, limit: int = MAX_DETAIL_TEXT) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "..."
    return value


def event_body_size(event: Mapping[str, Any]) -> int:
    """Byte size of a proxy event's body, measured on the raw event (decoded size when base64)."""
    body = event.get("body") or ""
    if not event.get("isBase64Encoded"):
        return len(body.encode("utf-8", "surrogatepass"))
    text = body.rstrip()
    padding = len(text) - len(text.rstrip("="))
    return max(0, len(text) * 3 // 4 - padding)


def admitted_event(event: Any) -> dict[str, Any]:
    """``event`` with a text body, as the routes read it, or the refusal the handler answers before any route
    runs: 400 :class:`~compactor.errors.InvalidEvent` for an event of another shape (:func:`well_formed_event`),
    413 :class:`~compactor.errors.RequestTooLarge` over :data:`MAX_BODY_BYTES`, measured before any
    decoding, and 400 when a base64 body (``isBase64Encoded``) is not base64 or does not decode to UTF-8 text,
    which Powertools' decoding raised as a 500 (docs/reliability.md#bounded-input). A base64 body is decoded here
    once, into a copy."""
    from compactor.errors import InvalidRequest, RequestTooLarge

    event = well_formed_event(event)
    if event_body_size(event) > MAX_BODY_BYTES:
        raise RequestTooLarge.over(MAX_BODY_BYTES)
    event = _plain_json(event)
    if not event.get("isBase64Encoded") or not event.get("body"):
        return event
    try:
        data = base64.b64decode(event["body"], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("the body is not valid base64 (the event says isBase64Encoded)") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"the body is not UTF-8 text (an invalid byte at offset {exc.start})") from None
    return {**event, "body": text, "isBase64Encoded": False}


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_FLAGS: dict[Any, bool] = {None: False, False: False, True: True, "false": False, "true": True}
_FLAG_TYPES = (str, bool, type(None))  # not 0 and 1, which are numbers


def well_formed_event(event: Any) -> dict[str, Any]:
    """``event`` when it has the shape of an API Gateway REST (v1) proxy event, in a copy where ``headers`` and
    ``multiValueHeaders`` (and the query's two fields) hold the same names, or 400
    :class:`~compactor.errors.InvalidEvent` naming what is not (docs/reliability.md#bounded-input).

    API Gateway always sends that shape; a test console, a hand-made invoke or another integration may not, and
    each of these used to raise from the handler or answer 500: no ``httpMethod`` or ``path`` (a Function URL's
    payload), a body that is a JSON object or number instead of text, a header or query value ``null``, a field of
    the wrong type. ``isBase64Encoded`` ``"true"``/``"false"`` (strings) are the flags they name: ``"false"`` was
    truthy, and its JSON body was refused as "not valid base64". An event with ``multiValueHeaders`` only was
    read as having no headers: its ``Content-Type`` went unchecked and its ``Idempotency-Key`` unseen.
    """
    from compactor.errors import InvalidEvent

    if not isinstance(event, Mapping):
        raise InvalidEvent(f"the event is a JSON {_json_kind(event)}, not an API Gateway REST proxy event (an object)")
    for name in ("httpMethod", "path"):
        if not (isinstance(event.get(name), str) and event[name]):
            raise InvalidEvent(f"the event has no {name} (a string): it is not an API Gateway REST proxy event")
    body = event.get("body")
    if body is not None and not isinstance(body, str):
        raise InvalidEvent(f"the event's body is a JSON {_json_kind(body)}: a proxy event carries the request body "
                           "as a string (the JSON text)")
    flag = event.get("isBase64Encoded")
    encoded = _FLAGS.get(flag.lower() if isinstance(flag, str) else flag) if isinstance(flag, _FLAG_TYPES) else None
    if encoded is None:
        raise InvalidEvent(f"the event's isBase64Encoded is {_quoted_value(flag)}: true or false")
    for name in ("requestContext", "pathParameters", "stageVariables"):
        if event.get(name) is not None and not isinstance(event[name], Mapping):
            raise InvalidEvent(f"the event's {name} is a JSON {_json_kind(event[name])}, not an object")
    headers, multi_headers = _fields(event, "headers", "multiValueHeaders", "header")
    query, multi_query = _fields(event, "queryStringParameters", "multiValueQueryStringParameters", "query parameter")
    return {**event, "isBase64Encoded": encoded, "headers": headers, "multiValueHeaders": multi_headers,
            "queryStringParameters": query, "multiValueQueryStringParameters": multi_query}


def _fields(event: Mapping[str, Any], single: str, multi: str, what: str) -> tuple[dict[str, str] | None,
                                                                                   dict[str, list[str]] | None]:
    """The ``single`` (name → last value) and ``multi`` (name → every value) fields of an event, each holding every
    name of both (headers by any case, as API Gateway and HTTP treat them), or 400 for a field that is not an object
    of strings (lists of strings)."""
    from compactor.errors import InvalidEvent

    fold = str.lower if what == "header" else str
    values: dict[str, list[str]] = {}
    spelled: dict[str, str] = {}
    last: dict[str, str] = {}
    for field, many in ((multi, True), (single, False)):
        given = event.get(field)
        if given is None:
            continue
        if not isinstance(given, Mapping):
            raise InvalidEvent(f"the event's {field} is a JSON {_json_kind(given)}, not an object")
        for name, value in given.items():
            listed = value if many else [value]
            if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
                wanted = "a list of strings" if many else "a string"
                raise InvalidEvent(f"the event's {what} {_quoted_value(name)} is {_quoted_value(value)}: {wanted} "
                                   f"(leave out a {what} without a value)")
            key = fold(name)
            spelled.setdefault(key, name)
            held = values.setdefault(key, [])
            if many:  # every line as it came, repeats included
                held.extend(listed)
            elif value not in held:  # the single field's value is normally the multi-value field's last
                held.append(value)
            if listed:
                last[key] = listed[-1]
    if not values:
        return None, None
    return ({spelled[key]: last[key] for key in values if key in last},
            {spelled[key]: held for key, held in values.items()})


def request_body_loads(text: str | bytes) -> Any:
    """A request body parsed as :func:`compactor.jsonutil.bounded_loads` parses it, refusing a top-level array: every
    route takes a JSON object (docs/behaviour.md#requests-and-responses), and Powertools' validation reads an array
    given for an object as its first member, so a bare transcript (``[{"role": "user", ...}]``, as the CLI and the S3
    path take one) was answered ``messages: Field required`` about its first message, and ``[{"messages": [...]},
    ...]`` was compacted as its first member without a word about the rest."""
    value = bounded_loads(text)
    if type(value) is list:
        raise JSONLimitError("the body is a JSON array: send a JSON object, a transcript's items under 'messages' "
                             "('input' for openai-responses) with their 'format' (docs/behaviour.md)")
    return value


def _json_kind(value: Any) -> str:
    kinds = ((bool, "boolean"), (str, "string"), (int, "number"), (float, "number"), (list, "array"),
             (Mapping, "object"), (type(None), "null"))
    return next((kind for python_type, kind in kinds if isinstance(value, python_type)), type(value).__name__)


def _quoted_value(value: Any, limit: int = 100) -> str:
    """``value`` as a refusal quotes it: a string in quotes, anything else as JSON, at most ``limit`` characters."""
    text = value if isinstance(value, str) else dense_dumps(value)
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return repr(text) if isinstance(value, str) else text


def _plain_json(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` when its body is plain JSON or it has none, else 415
    :class:`~compactor.errors.UnsupportedMediaType` (docs/behaviour.md#requests-and-responses): a request with
    a body, or any POST, that declares a ``Content-Type`` declares ``application/json``, compared as media
    types are (case aside, parameters aside), and one that declares a ``Content-Encoding`` declares
    ``identity``. Powertools compares
    ``startswith("application/json")`` and parses forms and multipart bodies, which no route takes; a header it
    would misread (``APPLICATION/JSON``) is written as it reads it, in a copy of the event."""
    from compactor.errors import UnsupportedMediaType

    if not (event.get("body") or event.get("httpMethod") in _BODY_METHODS):
        return event
    # A compressed body was parsed as it came: 422 "Expecting value". Decoding it would need a bound of its own
    # (a small gzip body inflates past the 10 MiB limit); no client needs it for a few MB of JSON.
    encoding = (header(event, "content-encoding") or "").strip()
    if encoding and encoding.lower() != "identity":
        raise UnsupportedMediaType.content_encoding(encoding)
    content_type = (header(event, "content-type") or "").strip()
    if not content_type:
        return event
    media_type, _, parameters = content_type.partition(";")
    if media_type.strip().lower() != JSON_CONTENT_TYPE:
        raise UnsupportedMediaType.content_type(content_type)
    if _declared_charset(parameters) not in _UTF8_CHARSETS:
        raise UnsupportedMediaType.charset(content_type)
    if content_type.startswith(JSON_CONTENT_TYPE):
        return event
    plain = {name: JSON_CONTENT_TYPE if name.lower() == "content-type" else value
             for name, value in event["headers"].items()}
    multi = {name: [JSON_CONTENT_TYPE] if name.lower() == "content-type" else values
             for name, values in (event.get("multiValueHeaders") or {}).items()}
    return {**event, "headers": plain, "multiValueHeaders": multi or None}


_UTF8_CHARSETS = frozenset({None, "utf-8", "utf8", "us-ascii"})  # UTF-8, or ASCII, which is UTF-8 too


def _declared_charset(parameters: str) -> str | None:
    """The ``charset`` among a media type's ``parameters`` (``; name=value`` …), lower case and unquoted; None
    when none is declared. A body declared in another charset is 415: API Gateway hands the function its body as
    UTF-8 text, so the bytes of another charset that are not UTF-8 would reach the transcript as U+FFFD, and those
    that are would be read as other characters (docs/behaviour.md#requests-and-responses)."""
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


def route_path(path: str) -> str:
    """``path`` as the routes name it: without the :data:`STAGE_PREFIX` a custom domain may pass through."""
    if path == STAGE_PREFIX:
        return "/"
    return path[len(STAGE_PREFIX):] if path.startswith(STAGE_PREFIX + "/") else path


def sent_path(event: Mapping[str, Any]) -> str:
    """The path the caller sent, for the messages that name it: API Gateway's ``requestContext.path``, which holds
    the stage on the execute-api URL (``/v1/compactt``) and whatever a custom domain passes through; else the
    event's ``path`` (an event without it). The event's ``path`` lacks the stage on the execute-api URL, so a 404
    or 405 naming it named a path the caller never called (``/compactt``; docs/behaviour.md#errors)."""
    context = event.get("requestContext")
    path = context.get("path") if isinstance(context, Mapping) else None
    return path if isinstance(path, str) and path else str(event.get("path") or "/")


def header(event: Mapping[str, Any], name: str) -> str | None:
    """The value of header ``name`` (any case) in a proxy event (:func:`well_formed_event`'s); None when absent.
    A header sent more than once with different values is 400 :class:`~compactor.errors.InvalidRequest`: the
    last of them was taken (the one ``headers`` holds), so of two ``Idempotency-Key`` values one was dropped
    without a word (docs/behaviour.md#errors)."""
    from compactor.errors import InvalidRequest

    wanted = name.lower()
    sent = [(key, value) for key, given in (event.get("multiValueHeaders") or {}).items() if key.lower() == wanted
            for value in given]
    different = len({value for _, value in sent})
    if different > 1:
        raise InvalidRequest(f"the header {sent[0][0]} was sent with {different} different values: send it once")
    for key, value in (event.get("headers") or {}).items():
        if key.lower() == wanted:
            return value
    return None


def proxy_response(status: int, body: Any) -> dict[str, Any]:
    """A REST proxy integration response carrying ``body`` as JSON."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": JSON_CONTENT_TYPE},
        "body": dense_dumps(body),
        "isBase64Encoded": False,
    }


def rest_proxy_event(
    *,
    method: str,
    resource_path: str,
    query: Mapping[str, list[str]],
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """The event API Gateway (REST, Lambda proxy) hands the function for a request to stage :data:`STAGE`.

    ``resource_path`` is the path without the stage prefix (``/compact`` for ``/v1/compact``), as in
    the event's ``path`` and ``resource`` when the API is called through its execute-api URL. A UTF-8 body is
    text (``isBase64Encoded`` false), as API Gateway delivers it when the API declares no binary media types.
    A body that is not UTF-8 is delivered as it came, base64 (``isBase64Encoded`` true), so that the handler
    refuses it with the 400 of :func:`admitted_event` (docs/reliability.md#bounded-input). API Gateway itself
    turns its invalid bytes into U+FFFD before the function runs, which it cannot tell from text the caller
    sent; this event used to do the same, and ``compactor serve`` then compacted a transcript other than the
    one it was sent (``"A\xff"`` became ``"A\ufffd"``) and answered 200.
    """
    multi_headers: dict[str, list[str]] = {}
    for name, value in headers:
        multi_headers.setdefault(name, []).append(value)
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    now = datetime.now(timezone.utc)
    return {
        "resource": resource_path,
        "path": resource_path,
        "httpMethod": method,
        "headers": {name: values[-1] for name, values in multi_headers.items()} or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": {name: values[-1] for name, values in query.items()} or None,
        "multiValueQueryStringParameters": dict(query) or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource_path,
            "httpMethod": method,
            "path": f"/{STAGE}{resource_path}",
            "stage": STAGE,
            "protocol": "HTTP/1.1",
            "requestId": str(uuid.uuid4()),
            "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
            "identity": {"sourceIp": source_ip},
        },
        "body": text if body else None,
        "isBase64Encoded": encoded,
    }
