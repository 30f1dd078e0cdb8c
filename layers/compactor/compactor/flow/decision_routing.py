"""Decision routing on an llm node (docs/behaviour.md#decision-routing): the route question, the bounded state the
routing decision sees, and how its answer picks the policy that runs the generation.

Pure functions only; :mod:`.execute` makes the calls. One ``choice`` question named ``route`` asks
the routing policy's decision model which choice fits; its criteria are the choice descriptions.
The proposed choice is used when the answer is valid and confident enough, otherwise the declared
fallback choice is, with one of the ``fallback_reason`` values below.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..decision_validation import DECISION_REQUEST_MAX_BYTES, DecisionValidationError, validate_answers, validate_payload
from ..jsonutil import ascii_wire_size
from ..records import record

ROUTE_QUESTION: Final = "route"

# Bounds of the routing state (characters).
MAX_MESSAGE_CHARS: Final = 2400
MAX_MESSAGES_CHARS: Final = 12_000
MIN_ROOM_CHARS: Final = 128  # stop adding messages when less than this remains
MAX_REQUEST_CHARS: Final = 2000

# fallback_reason values.
DECISION_FAILED: Final = "decision_failed"  # the router returned a failure (no offer, every attempt failed)
UNCERTAIN: Final = "uncertain"  # confidence missing or below min_confidence
INVALID_DECISION: Final = "invalid_decision"  # payload or answer failed the decision validation
DECISION_TIMEOUT: Final = "decision_timeout"  # routing timeout, node timeout or flow budget hit
DECISION_ERROR: Final = "decision_error"  # the routed call raised


def route_question(instructions: str, descriptions: Mapping[str, str]) -> dict[str, Any]:
    """The ``route`` choice question: the routing instructions, one criterion per choice."""
    return {"type": "choice", "instructions": instructions, "criteria": dict(descriptions)}


def project_messages(conversation: Sequence[Mapping[str, Any]]) -> tuple[list[str], int]:
    """Newest message first, each as ASCII JSON (``json.dumps`` defaults) cut to 2400 characters,
    at most 12 000 characters in all; adding stops once fewer than 128 remain. Returns the texts
    and how many messages were left out."""
    texts: list[str] = []
    room = MAX_MESSAGES_CHARS
    for message in reversed(conversation):
        if room < MIN_ROOM_CHARS:
            break
        try:
            text = json.dumps(message)
        except (TypeError, ValueError):
            text = json.dumps(str(message))
        text = text[:min(MAX_MESSAGE_CHARS, room)]
        texts.append(text)
        room -= len(text)
    return texts, len(conversation) - len(texts)


def routing_state(conversation: Sequence[Mapping[str, Any]], request: str) -> dict[str, Any]:
    """The state of the routing decision: ``messages`` (newest first), ``omitted_messages``,
    ``request`` (the node's user prompt, at most 2000 characters) and ``request_truncated``. The
    messages are the request conversation's, also for nodes with ``context: "inputs"``."""
    messages, omitted = project_messages(conversation)
    return {"messages": messages, "omitted_messages": omitted, "request": request[:MAX_REQUEST_CHARS],
            "request_truncated": len(request) > MAX_REQUEST_CHARS}


def fitted_payload(state: dict[str, Any], questions: dict[str, Any]) -> dict[str, Any]:
    """``{state, questions}`` passing the decision payload validation: while the 32 000-byte bound is
    exceeded, the oldest projected messages are dropped (and counted as omitted). Raises
    :class:`DecisionValidationError` when it does not fit even without messages."""
    state = {**state, "messages": list(state["messages"])}
    while True:
        payload = {"state": state, "questions": questions}
        try:
            validate_payload(payload)
            return payload
        except DecisionValidationError:
            excess = ascii_wire_size(payload) - DECISION_REQUEST_MAX_BYTES
            if not state["messages"] or excess <= 0:  # nothing to drop, or not a size problem
                raise
        while state["messages"] and excess > 0:  # drop at least enough, then measure again
            excess -= ascii_wire_size(state["messages"].pop()) + 1
            state["omitted_messages"] += 1


@record(frozen=True, slots=True)
class RouteChoice:
    """What a routing decision's answer amounts to."""

    proposed: str | None  # the valid proposed choice, else None
    confidence: float | None
    probabilities: dict[str, float] | None
    fallback_reason: str | None  # None: the proposed choice runs


def read_answer(questions: dict[str, Any], answer: Mapping[str, Any], *, model_family: str | None,
                min_confidence: float) -> tuple[RouteChoice, str | None]:
    """Validate a routing answer ``{model, answers, usage}`` and decide. Returns the choice and, for
    an invalid answer, the validation message."""
    try:
        validate_answers(questions, dict(answer), model_family=model_family)
    except DecisionValidationError as exc:
        return RouteChoice(None, None, None, INVALID_DECISION), exc.message
    route = answer["answers"][ROUTE_QUESTION]
    confidence, probabilities = route.get("confidence"), route.get("probabilities")
    uncertain = confidence is None or confidence < min_confidence
    return RouteChoice(route["choice"], confidence, probabilities, UNCERTAIN if uncertain else None), None
