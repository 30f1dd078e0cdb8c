"""Native-decision payload and answer validation (docs/behaviour.md#native-decisions)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.decision_validation import (
    DECISION_RESPONSE_MAX_BYTES, DecisionValidationError, is_jev_family, questions_wire_size, validate_answers,
    validate_payload, validate_questions, validate_state,
)
from compactor.jsonutil import ascii_wire_size

CHOICE = {"type": "choice", "instructions": "Pick one.", "criteria": {"keep": "Keep it.", "summarize": "Shorten."}}
SCORE = {"type": "score", "instructions": "Rate it.", "criteria": ["low", "mid", "high"]}
NOUL = {"type": "noul", "instructions": "Is it true?", "criteria": {"true": "yes", "false": "no"}}
QUESTIONS = {"c": CHOICE, "s": SCORE, "n": NOUL}


def payload(**questions: Any) -> dict[str, Any]:
    return {"state": {"fragment": "text"}, "questions": questions or copy.deepcopy(QUESTIONS)}


def message_for(value: Any) -> str:
    with pytest.raises(DecisionValidationError) as caught:
        validate_payload(value)
    return caught.value.message


def test_valid_payloads() -> None:
    validate_payload(payload())
    validate_payload({"state": "text", "questions": {"n": {"type": "noul", "instructions": "x"}}})
    validate_payload({"state": [1, 2], "questions": {"n": {"type": "noul", "instructions": "x", "criteria": None}}})
    validate_payload(payload(c={"type": "choice", "instructions": "x", "criteria": {"only": None}}))
    assert DECISION_RESPONSE_MAX_BYTES == 131072


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not an object", "Provide state and questions."),
        ({"state": "s"}, "Provide state and questions."),
        ({"state": "s", "questions": {}, "extra": 1}, "Provide state and questions."),
        ({"state": 5, "questions": QUESTIONS}, "state must be text, an object or an array."),
        ({"state": None, "questions": QUESTIONS}, "state must be text, an object or an array."),
        ({"state": {"x": math.nan}, "questions": QUESTIONS}, "state must be text, an object or an array."),
        ({"state": "s", "questions": {}}, "Provide between 1 and 32 questions."),
        ({"state": "s", "questions": []}, "Provide between 1 and 32 questions."),
        ({"state": "s", "questions": {f"q{i}": NOUL for i in range(33)}}, "Provide between 1 and 32 questions."),
        (payload(**{"x" * 65: NOUL}), "Invalid question."),
        ({"state": "s", "questions": {"": NOUL}}, "Invalid question."),
        (payload(q="noul"), "Invalid question."),
        (payload(q={**NOUL, "extra": 1}), "Unsupported question field."),
        (payload(q={"type": "noul"}), "Each question needs instructions (1–2000 characters)."),
        (payload(q={**NOUL, "instructions": ""}), "Each question needs instructions (1–2000 characters)."),
        (payload(q={**NOUL, "instructions": "x" * 2001}), "Each question needs instructions (1–2000 characters)."),
        (payload(q={**CHOICE, "criteria": {}}), "Choice questions need 1–32 criteria."),
        (payload(q={**CHOICE, "criteria": ["a"]}), "Choice questions need 1–32 criteria."),
        (payload(q={**CHOICE, "criteria": {f"o{i}": "" for i in range(33)}}), "Choice questions need 1–32 criteria."),
        (payload(q={**CHOICE, "criteria": {"": "empty"}}), "Invalid choice name."),
        (payload(q={**CHOICE, "criteria": {"y" * 65: "long"}}), "Invalid choice name."),
        (payload(q={**SCORE, "criteria": ["one"]}), "Score questions need 2–32 ordered criteria."),
        (payload(q={**SCORE, "criteria": {"a": "b"}}), "Score questions need 2–32 ordered criteria."),
        (payload(q={**SCORE, "criteria": ["l"] * 33}), "Score questions need 2–32 ordered criteria."),
        (payload(q={**NOUL, "criteria": {"true": "t"}}), "Noul criteria must describe true and false."),
        (payload(q={**NOUL, "criteria": "both"}), "Noul criteria must describe true and false."),
        (payload(q={**NOUL, "type": "rank"}), "Supported question types: choice, score, noul."),
        (payload(q={"instructions": "x"}), "Supported question types: choice, score, noul."),
        (payload(q={**CHOICE, "criteria": {"a": "d" * 2001}}), "Invalid criterion description."),
        (payload(q={**SCORE, "criteria": ["a", 3]}), "Invalid criterion description."),
        (payload(q={**NOUL, "criteria": {"true": 1, "false": "no"}}), "Invalid criterion description."),
    ],
)
def test_payload_messages(value: Any, message: str) -> None:
    assert message_for(value) == message


def test_size_bound_uses_ascii_wire_size() -> None:
    questions = {"n": {"type": "noul", "instructions": "x"}}
    overhead = ascii_wire_size({"state": "", "questions": questions})
    # Each "é" is 2 UTF-8 bytes but 6 wire bytes (\u00e9): the wire measure is the one that counts.
    limit_chars = (32000 - overhead) // 6
    validate_payload({"state": "é" * limit_chars, "questions": questions})
    assert message_for({"state": "é" * (limit_chars + 1), "questions": questions}) == \
        "Decision request exceeds 32000 bytes."
    emoji = "\U0001F600"  # 12 wire bytes
    assert message_for({"state": emoji * 2700, "questions": questions}) == "Decision request exceeds 32000 bytes."
    exact = {"state": "a" * (32000 - overhead), "questions": questions}
    assert ascii_wire_size(exact) == 32000
    validate_payload(exact)
    assert message_for({"state": "a" * (32001 - overhead), "questions": questions}) == \
        "Decision request exceeds 32000 bytes."


def test_a_question_shared_by_several_names_is_checked_for_every_name() -> None:
    shared = {"type": "noul", "instructions": "x"}
    validate_payload({"state": "s", "questions": {"a": shared, "b": shared}})
    assert message_for({"state": "s", "questions": {"a": shared, "x" * 65: shared}}) == "Invalid question."
    bad = {"type": "noul"}
    assert message_for({"state": "s", "questions": {"a": bad, "b": bad}}) == \
        "Each question needs instructions (1–2000 characters)."


@pytest.mark.parametrize(("state", "message"), [
    (5, "state must be text, an object or an array."),
    ({"x": math.nan}, "state must be text, an object or an array."),
    ("a" * 32000, "Decision request exceeds 32000 bytes."),
])
def test_validate_state_gives_the_payload_messages(state: Any, message: str) -> None:
    questions = {"n": {"type": "noul", "instructions": "x"}}
    with pytest.raises(DecisionValidationError) as caught:
        validate_state(state, questions)
    assert caught.value.message == message == message_for({"state": state, "questions": questions})
    validate_state({"fragment": "text"}, questions)


def answers(**overrides: Any) -> dict[str, Any]:
    base = {
        "c": {"type": "choice", "choice": "summarize", "confidence": 0.8,
              "probabilities": {"keep": 0.2, "summarize": 0.8}},
        "s": {"type": "score", "score": 1.5, "probabilities": {"0": 0.1, "1": 0.4, "2": 0.5}},
        "n": {"type": "noul", "noul": 0.25},
    }
    base.update(overrides)
    return {"model": "acme/decider-1", "answers": base,
            "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7, "cost": 0.0001}}


def answer_message(response: Any, family: str | None = None) -> str:
    with pytest.raises(DecisionValidationError) as caught:
        validate_answers(QUESTIONS, response, model_family=family)
    return caught.value.message


def test_valid_answers() -> None:
    validate_answers(QUESTIONS, answers())
    minimal = answers(c={"type": "choice", "choice": "keep"}, s={"type": "score", "score": 0})
    del minimal["usage"]
    validate_answers(QUESTIONS, minimal)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.update(model=""), "Missing decision model."),
        (lambda r: r.pop("model"), "Missing decision model."),
        (lambda r: r["answers"].pop("n"), "Missing or unexpected answers."),
        (lambda r: r["answers"].update(extra={"type": "noul", "noul": 1}), "Missing or unexpected answers."),
        (lambda r: r.update(answers=[]), "Missing or unexpected answers."),
        (lambda r: r["answers"]["c"].update(choice="archive"), "unknown_choice"),
        (lambda r: r["answers"]["c"].update(choice=None), "unknown_choice"),
        (lambda r: r["answers"]["n"].update(type="choice"), "Invalid answer type."),
        (lambda r: r["answers"]["c"].update(confidence=1.5), "Invalid confidence."),
        (lambda r: r["answers"]["c"].update(probabilities={"keep": 0.5, "summarize": 0.6}), "Invalid probabilities."),
        (lambda r: r["answers"]["c"].update(probabilities={"keep": 1.0}), "Invalid probabilities."),
        (lambda r: r["answers"]["c"].update(probabilities={"keep": -0.2, "summarize": 1.2}), "Invalid probabilities."),
        (lambda r: r["answers"]["c"].update(probabilities={"keep": 0.8, "summarize": 0.2}), "Invalid probabilities."),
        (lambda r: r["answers"]["s"].update(score=3), "Invalid score."),
        (lambda r: r["answers"]["s"].update(score=-0.1), "Invalid score."),
        (lambda r: r["answers"]["s"].update(score=True), "Invalid score."),
        (lambda r: r["answers"]["s"].update(probabilities={"0": 0.5, "1": 0.5}), "Invalid probabilities."),
        (lambda r: r["answers"]["n"].update(noul=1.01), "Invalid noul answer."),
        (lambda r: r["answers"]["n"].pop("noul"), "Invalid noul answer."),
        (lambda r: r.update(usage=[]), "Invalid usage."),
        (lambda r: r["usage"].update(input_tokens=-1), "Invalid usage."),
        (lambda r: r["usage"].update(total_tokens=1.5), "Invalid usage."),
        (lambda r: r["usage"].update(cost=-0.01), "Invalid usage."),
        (lambda r: r["usage"].update(cost=math.inf), "Invalid usage."),
    ],
)
def test_answer_messages(mutate: Any, message: str) -> None:
    response = answers()
    mutate(response)
    assert answer_message(response) == message


def test_not_an_object() -> None:
    assert answer_message(None) == "Missing decision model."


def test_argmax_tolerance_allows_ties() -> None:
    tie = answers(c={"type": "choice", "choice": "keep", "probabilities": {"keep": 0.5, "summarize": 0.5}})
    validate_answers(QUESTIONS, tie)


THREE_WAY = {"q": {"type": "choice", "instructions": "x", "criteria": {"a": "", "b": "", "c": ""}}}


def three_way(probabilities: dict[str, float], choice: str = "a") -> dict[str, Any]:
    return {"model": "typesafe/jev-1.13",
            "answers": {"q": {"type": "choice", "choice": choice, "probabilities": probabilities}}}


def test_jev_two_decimal_rounding_is_accepted_only_for_jev() -> None:
    rounded = three_way({"a": 0.33, "b": 0.33, "c": 0.33})
    validate_answers(THREE_WAY, rounded, model_family="jev-1.13")
    validate_answers(THREE_WAY, rounded, model_family="typesafe/jev-latest")
    validate_answers(THREE_WAY, rounded)  # family taken from the response model
    with pytest.raises(DecisionValidationError, match="Invalid probabilities."):
        validate_answers(THREE_WAY, rounded, model_family="acme-decider")
    with pytest.raises(DecisionValidationError, match="Invalid probabilities."):
        validate_answers(THREE_WAY, rounded, model_family="jev-x")


def test_jev_allowance_stays_strict_otherwise() -> None:
    # 0.3 × 3 = 0.9: even with ±0.005 per value the intervals cannot reach 1.
    with pytest.raises(DecisionValidationError):
        validate_answers(THREE_WAY, three_way({"a": 0.3, "b": 0.3, "c": 0.3}), model_family="jev-1")
    # Not two-decimal numbers: strict sum rule applies.
    with pytest.raises(DecisionValidationError):
        validate_answers(THREE_WAY, three_way({"a": 0.333, "b": 0.333, "c": 0.333}), model_family="jev-1")
    # Choice must still be the most probable.
    with pytest.raises(DecisionValidationError):
        validate_answers(THREE_WAY, three_way({"a": 0.33, "b": 0.34, "c": 0.33}), model_family="jev-1")
    validate_answers(THREE_WAY, three_way({"a": 0.34, "b": 0.33, "c": 0.33}), model_family="jev-1")


def test_jev_family_names() -> None:
    assert is_jev_family("jev-latest") and is_jev_family("JEV-2") and is_jev_family("typesafe/jev-1.13")
    assert not is_jev_family("jev-") and not is_jev_family("jevx-1") and not is_jev_family(None)


def test_score_criteria_must_be_strings() -> None:
    with pytest.raises(DecisionValidationError, match="Invalid criterion description."):
        validate_payload(payload(c={"type": "score", "instructions": "x", "criteria": [None, None]}))


_NAMES = st.text(min_size=1, max_size=64) | st.sampled_from(['a"b', "a\\b", "tab\there", "é", "\x7f", "\u2028", "\ud800"])
_QUESTION = st.builds(
    lambda instructions, kind, labels: {"type": kind, "instructions": instructions,
                                        **({"criteria": labels} if kind != "noul" else {})},
    st.text(min_size=1, max_size=40), st.sampled_from(["choice", "noul"]),
    st.dictionaries(_NAMES, st.text(max_size=20) | st.none(), min_size=1, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(_QUESTION, min_size=1, max_size=3), st.lists(st.tuples(_NAMES, st.integers(0, 2)), min_size=1,
                                                             max_size=32))
def test_the_questions_wire_size_is_their_encodings(shared: list[dict[str, Any]], names: list[tuple[str, int]]) -> None:
    """Questions sharing question objects are measured with each object once: the same size as encoding them,
    and the payload's size and bound are the same as encoding the whole payload."""
    questions = {name: shared[index % len(shared)] for name, index in names}
    try:
        validate_payload({"state": {}, "questions": questions})
    except DecisionValidationError:
        return  # rejected before its size is measured
    assert questions_wire_size(questions) == ascii_wire_size(questions)
    for state in ({}, "x" * 31_000, {"a": ["é" * 10]}):
        whole = ascii_wire_size({"state": state, "questions": questions})
        if whole <= 32_000:
            validate_payload({"state": state, "questions": questions})
            assert validate_state(state, questions, ascii_wire_size(state)) == validate_state(state, questions) == whole
        else:
            assert message_for({"state": state, "questions": questions}) == "Decision request exceeds 32000 bytes."


_ODD_QUESTIONS = st.one_of(
    st.none(), st.just({}), st.just([]), st.dictionaries(_NAMES, st.one_of(_QUESTION, st.just({"type": "choice"}),
                                                                       st.just("text")), min_size=1, max_size=34),
    st.just({f"q{i}": {"type": "choice", "instructions": "x" * 1999, "criteria": {"a": "y" * 1999}}
             for i in range(9)}),  # over the 32 000-byte bound with an empty state
    st.just({1: CHOICE}))


@settings(max_examples=300, deadline=None)
@given(_ODD_QUESTIONS)
def test_validate_questions_is_validate_payload_with_an_empty_state(questions: Any) -> None:
    """What admission measures once per decision node (docs/performance.md): the same verdicts and messages as
    the whole payload with an empty state, and the size its runs then add to each state's."""
    try:
        size = validate_questions(questions)
    except DecisionValidationError as exc:
        assert message_for({"state": {}, "questions": questions}) == exc.message
        return
    validate_payload({"state": {}, "questions": questions})
    assert size == questions_wire_size(questions) == ascii_wire_size(questions)
    for state in ({"a": 1}, "x" * 30_000):
        assert validate_state(state, questions, ascii_wire_size(state), size) == validate_state(state, questions)
