"""Native-decision rules shared by every decision path (docs/behaviour.md#native-decisions).

A decision is ``{"state": …, "questions": {name: question}}``; the answer is
``{"model": str, "answers": {name: answer}, "usage": {...}?}``. This module only checks shapes and
bounds; it never calls a model. Its error messages are part of the API and stay byte-exact.
"""

from __future__ import annotations

import math
import re
from typing import Any, NoReturn

from compactor.jsonutil import is_finite_number
from compactor.jsonutil import ascii_dumps, ascii_wire_size

DECISION_REQUEST_MAX_BYTES = 32_000
DECISION_RESPONSE_MAX_BYTES = 131_072
MAX_QUESTIONS = 32
MAX_NAME_CHARS = 64
MAX_TEXT_CHARS = 2_000
_QUESTION_FIELDS = frozenset({"type", "instructions", "criteria"})

# Probability mass must sum to 1 within this; the chosen label must be within _ARGMAX_TOL of the max.
_MASS_TOL = 1e-6
_ARGMAX_TOL = 1e-9
# Jev models round each probability to two decimals independently.
# Compiled on first use by ``re``'s cache, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_JEV_FAMILY = r"(?i)jev-(?:latest|\d.*)"
_JEV_HALF_STEP = 0.005


class DecisionValidationError(ValueError):
    """A decision payload or answer that breaks the rules; ``message`` is safe to show callers."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _fail(message: str) -> NoReturn:
    raise DecisionValidationError(message)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= MAX_NAME_CHARS


_is_number = is_finite_number


def _is_unit(value: Any) -> bool:
    return _is_number(value) and 0 <= value <= 1


def validate_payload(payload: Any) -> None:
    """Check a ``{state, questions}`` decision payload (docs/behaviour.md#native-decisions), including the 32 000-byte
    ASCII wire bound. Raises :class:`DecisionValidationError` with the reference message."""
    if not isinstance(payload, dict) or set(payload) != {"state", "questions"}:
        _fail("Provide state and questions.")
    if not isinstance(payload["state"], (str, dict, list)):
        _fail("state must be text, an object or an array.")
    questions = payload["questions"]
    _check_questions(questions)
    _check_size(payload["state"], questions)


def _check_questions(questions: Any) -> None:
    if not isinstance(questions, dict) or not 1 <= len(questions) <= MAX_QUESTIONS:
        _fail("Provide between 1 and 32 questions.")
    checked: set[int] = set()  # a question object several names share is checked once
    for name, question in questions.items():
        if id(question) in checked:
            if not _is_name(name):
                _fail("Invalid question.")
            continue
        _validate_question(name, question)
        checked.add(id(question))


def validate_questions(questions: Any) -> int:
    """:func:`validate_payload` of ``{"state": {}, "questions": questions}`` (the same checks and messages),
    returning the questions' ASCII wire size: a flow's decision node measures its questions once, when it is
    admitted, for the bound its states are checked against (:func:`validate_state`, docs/performance.md)."""
    _check_questions(questions)
    try:
        size = questions_wire_size(questions)
    except (TypeError, ValueError):  # as _check_size says it
        _fail("state must be text, an object or an array.")
    if _PAYLOAD_WIRE + 2 + size > DECISION_REQUEST_MAX_BYTES:  # 2: the empty object
        _fail("Decision request exceeds 32000 bytes.")
    return size


def validate_state(state: Any, questions: dict[str, Any], state_bytes: int | None = None,
                   questions_bytes: int | None = None) -> int:
    """The checks of :func:`validate_payload` that depend on the state, for ``questions`` that passed it
    already (a flow's decision node, admitted with them: docs/performance.md). Same messages. Returns the
    payload's ASCII wire size. ``state_bytes``: the state's own ASCII wire size when its maker measured it
    (then only the questions are encoded); ``questions_bytes``: the questions' (:func:`validate_questions`)
    when they were measured already."""
    if not isinstance(state, (str, dict, list)):
        _fail("state must be text, an object or an array.")
    if state_bytes is None:
        return _check_size(state, questions, questions_bytes)
    size = _PAYLOAD_WIRE + state_bytes + (questions_wire_size(questions) if questions_bytes is None
                                          else questions_bytes)
    if size > DECISION_REQUEST_MAX_BYTES:
        _fail("Decision request exceeds 32000 bytes.")
    return size


_PAYLOAD_WIRE = len('{"state": , "questions": }')  # the payload around its two values on the ASCII wire


def questions_wire_size(questions: dict[str, Any]) -> int:
    """``ascii_wire_size(questions)`` of questions that passed :func:`validate_payload` (string names, JSON
    question objects), each question object several names share measured once (docs/performance.md)."""
    sizes: dict[int, int] = {}
    total = 2 + 2 * max(0, len(questions) - 1)  # the braces and the ", " between members
    for name, question in questions.items():
        size = sizes.get(id(question))
        if size is None:
            size = sizes[id(question)] = ascii_wire_size(question)
        plain = name.isascii() and name.isprintable() and '"' not in name and "\\" not in name
        total += (len(name) + 2 if plain else len(ascii_dumps(name))) + 2 + size  # "name": question
    return total


def _check_size(state: Any, questions: dict[str, Any], questions_bytes: int | None = None) -> int:
    try:
        size = _PAYLOAD_WIRE + ascii_wire_size(state) + (questions_wire_size(questions) if questions_bytes is None
                                                         else questions_bytes)
    except (TypeError, ValueError):  # non-JSON values or NaN/Infinity inside the state
        _fail("state must be text, an object or an array.")
    if size > DECISION_REQUEST_MAX_BYTES:
        _fail("Decision request exceeds 32000 bytes.")
    return size


def _validate_question(name: Any, question: Any) -> None:
    if not _is_name(name) or not isinstance(question, dict):
        _fail("Invalid question.")
    if set(question) - _QUESTION_FIELDS:
        _fail("Unsupported question field.")
    instructions = question.get("instructions")
    if not isinstance(instructions, str) or not 1 <= len(instructions) <= MAX_TEXT_CHARS:
        _fail("Each question needs instructions (1–2000 characters).")
    kind, criteria = question.get("type"), question.get("criteria")
    if kind == "choice":
        if not isinstance(criteria, dict) or not 1 <= len(criteria) <= 32:
            _fail("Choice questions need 1–32 criteria.")
        if not all(_is_name(label) for label in criteria):
            _fail("Invalid choice name.")
        descriptions = list(criteria.values())
    elif kind == "score":
        if not isinstance(criteria, list) or not 2 <= len(criteria) <= 32:
            _fail("Score questions need 2–32 ordered criteria.")
        descriptions = criteria
    elif kind == "noul":
        if criteria is not None and (not isinstance(criteria, dict) or set(criteria) != {"true", "false"}):
            _fail("Noul criteria must describe true and false.")
        descriptions = list((criteria or {}).values())
    else:
        _fail("Supported question types: choice, score, noul.")
    for description in descriptions:
        if description is None and kind != "score":
            continue  # choice and noul criteria may be left undescribed; score criteria are the strings
        if not isinstance(description, str) or len(description) > MAX_TEXT_CHARS:
            _fail("Invalid criterion description.")


def is_jev_family(model_family: str | None) -> bool:
    """True for ``jev-latest`` / ``jev-<digit>…`` families, with or without a vendor prefix."""
    if not model_family:
        return False
    return bool(re.fullmatch(_JEV_FAMILY, model_family.rsplit("/", 1)[-1]))


def _is_two_decimal(value: float) -> bool:
    scaled = value * 100
    return abs(scaled - round(scaled)) < 1e-9


def _mass_ok(values: list[float], *, jev: bool) -> bool:
    if abs(math.fsum(values) - 1) <= _MASS_TOL:
        return True
    if not (jev and all(_is_two_decimal(v) for v in values)):
        return False
    low = math.fsum(max(0.0, v - _JEV_HALF_STEP) for v in values)
    high = math.fsum(min(1.0, v + _JEV_HALF_STEP) for v in values)
    return low - _MASS_TOL <= 1 <= high + _MASS_TOL


def _validate_distribution(probabilities: Any, labels: list[str], *, jev: bool) -> dict[str, float]:
    if (
        not isinstance(probabilities, dict)
        or set(probabilities) != set(labels)
        or not all(_is_unit(p) for p in probabilities.values())
        or not _mass_ok(list(probabilities.values()), jev=jev)
    ):
        _fail("Invalid probabilities.")
    return probabilities


def validate_answers(questions: dict[str, Any], response_obj: Any, *, model_family: str | None = None) -> None:
    """Check a provider's decision object against the (already valid) questions (docs/behaviour.md#native-decisions).

    ``model_family`` enables the Jev two-decimal rounding allowance; when omitted the response's own
    ``model`` decides. Raises :class:`DecisionValidationError`.
    """
    if not isinstance(response_obj, dict) or not isinstance(response_obj.get("model"), str) or not response_obj["model"]:
        _fail("Missing decision model.")
    answers = response_obj.get("answers")
    if not isinstance(answers, dict) or set(answers) != set(questions):
        _fail("Missing or unexpected answers.")
    jev = is_jev_family(model_family if model_family is not None else response_obj["model"])
    for name, question in questions.items():
        _validate_answer(answers[name], question, jev=jev)
    _validate_usage(response_obj.get("usage"))


def _validate_answer(answer: Any, question: dict[str, Any], *, jev: bool) -> None:
    kind = question["type"]
    if not isinstance(answer, dict) or answer.get("type") != kind:
        _fail("Invalid answer type.")
    if answer.get("confidence") is not None and not _is_unit(answer["confidence"]):
        _fail("Invalid confidence.")
    if kind == "choice":
        criteria = question["criteria"]
        choice = answer.get("choice")
        if not isinstance(choice, str) or choice not in criteria:  # its labels are its keys
            _fail("unknown_choice")
        if answer.get("probabilities") is not None:
            probabilities = _validate_distribution(answer["probabilities"], list(criteria), jev=jev)
            if probabilities[choice] < max(probabilities.values()) - _ARGMAX_TOL:
                _fail("Invalid probabilities.")
    elif kind == "score":
        levels = len(question["criteria"])
        score = answer.get("score")
        if not _is_number(score) or not 0 <= score <= levels - 1:
            _fail("Invalid score.")
        if answer.get("probabilities") is not None:
            _validate_distribution(answer["probabilities"], [str(i) for i in range(levels)], jev=jev)
    elif not _is_unit(answer.get("noul")):
        _fail("Invalid noul answer.")


def _validate_usage(usage: Any) -> None:
    if usage is None:
        return
    if not isinstance(usage, dict):
        _fail("Invalid usage.")
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        if key in usage and (type(usage[key]) is not int or usage[key] < 0):
            _fail("Invalid usage.")
    cost = usage.get("cost")
    if cost is not None and (not _is_number(cost) or cost < 0):
        _fail("Invalid usage.")
