"""A model call's body (``jsonutil.dense_body``, docs/performance.md "The calls' bodies") is the bytes ``json.dumps``
gave (``ensure_ascii=False``, dense separators, no NaN, UTF-8), and fails as it failed: on random values whose long
strings hold non-ASCII text, control characters, quotes, backslashes and lone surrogates, on the transports' own
bodies, and through ``post_json`` to a provider."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.flow.values import WireSized
from compactor.jsonutil import BODY_QUOTED_MIN, dense_body
from compactor.providers.base import ChatRequest, DecisionRequest, Offer
from compactor.providers.openai import chat_body


def before(value: Any) -> bytes:
    """How ``post_json`` encoded a body before ``dense_body``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def outcome(encode: Any, value: Any) -> Any:
    try:
        return encode(value)
    except Exception as exc:  # noqa: BLE001 - the kind and words of any failure are what is compared
        return type(exc), str(exc)


SPECIALS = ['"', "\\", "\n", "\t", "\r", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f", "\x80", "é", "\u2028", "✓",
            "😀", "\ud800", "\udfff", "\\u0000", '\\"']
# Text of every kind: ASCII, any character UTF-8 can carry, the characters the encoder escapes, lone surrogates.
_piece = st.text(alphabet=st.one_of(st.characters(codec="ascii"), st.characters(codec="utf-8"),
                                    st.sampled_from([c for c in SPECIALS if len(c) == 1])), min_size=1, max_size=24)


@st.composite
def long_text(draw: Any) -> str:
    """A string around BODY_QUOTED_MIN characters (on either side of it), with at most a few specials put anywhere."""
    piece = draw(_piece)
    length = BODY_QUOTED_MIN + draw(st.integers(-3, 600))
    text = (piece * (length // len(piece) + 1))[:length]
    for special in draw(st.lists(st.sampled_from(SPECIALS), max_size=3)):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + special + text[at:]
    return text


_text = st.one_of(_piece, long_text())
_scalar = (st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30) | st.floats() | _text)
_key = st.one_of(_piece, _piece, _piece, st.integers(-5, 5), st.booleans(), st.none(), st.floats(allow_nan=False))


def _containers(inner: Any) -> Any:
    return (st.lists(inner, max_size=10) | st.dictionaries(_key, inner, max_size=10)
            | st.tuples(inner, inner) | st.dictionaries(_piece, inner, max_size=10).map(lambda d: WireSized(d, 0)))


_value = st.recursive(_scalar, _containers, max_leaves=24)
_message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": _text})


@settings(max_examples=600, deadline=None, derandomize=True)
@given(_value)
def test_a_body_is_what_json_dumps_gave_or_fails_as_it_failed(value: Any) -> None:
    assert outcome(dense_body, value) == outcome(before, value)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_message, min_size=1, max_size=9), st.booleans(), st.none() | st.integers(1, 4096))
def test_a_chat_body_is_what_json_dumps_gave(messages: list[dict[str, Any]], json_mode: bool,
                                             max_tokens: int | None) -> None:
    offer = Offer(id="o", provider="p", family="f", model="m-1", protocol="chat", transport="openai",
                  base_url="http://127.0.0.1:1/v1")
    body = chat_body(offer, ChatRequest(messages=messages, max_tokens=max_tokens, json_mode=json_mode))
    assert outcome(dense_body, body) == outcome(before, body)


def test_every_kind_of_long_string_at_each_walked_place() -> None:
    """Each special in a long prompt, as the content of a chat body's message (where it is quoted by replacements
    when it holds no control character) and deeper (where the encoder quotes it), and among more members than are
    walked."""
    for special in SPECIALS:
        prompt = ("{\"fragment_1\":\"[{\\\"role\\\":\\\"tool\\\"}]\"," * 80) + special + "é✓" * 10
        assert len(prompt) >= BODY_QUOTED_MIN
        for body in ({"model": "m", "messages": [{"role": "system", "content": "Be brief.\nJSON."},
                                                 {"role": "user", "content": prompt}], "max_tokens": 5},
                     {"messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}]},
                     {"questions": {f"q{i}": prompt for i in range(12)}},
                     [prompt] * 9, prompt, WireSized({"state": prompt}, 0)):
            assert outcome(dense_body, body) == outcome(before, body), special


def test_it_refuses_what_json_dumps_refuses_with_its_words() -> None:
    long = "x" * BODY_QUOTED_MIN
    cycle: list[Any] = []
    cycle.append(cycle)
    for bad in ({"a": float("nan")}, {"a": [long, float("inf")]}, {"a": {1, 2}}, {"a": {("k",): 1}},
                {"messages": [{"content": long + "\ud800"}]}, {"messages": [{"content": "\udfff"}], "x": long},
                {"a": cycle}, {"a": object()}):
        expected = outcome(before, bad)
        assert isinstance(expected, tuple)
        assert outcome(dense_body, bad) == expected
    # keys of other types, as json.dumps writes them
    assert dense_body({1: long, None: [long], 2.5: True, False: "é"}) == before({1: long, None: [long], 2.5: True,
                                                                              False: "é"})


def test_a_decision_body_is_what_json_dumps_gave() -> None:
    question = {"type": "choice", "instructions": "Classify.", "criteria": {"keep": "k", "summarize": "s"}}
    evidence = '[{"role": "tool", "content": "' + "ok \\\"quoted\\\" line\\n" * 200 + '"}]'
    state = WireSized({"guidance": "g", "instructions": [{"role": "system", "content": "x" * 3000}],
                       "recent_evidence": [evidence], "fragments": [{"id": f"f{i}", "bytes": 10, "evidence": evidence}
                                                                    for i in range(11)]}, 0)
    request = DecisionRequest(state=state, questions={f"f{i}": question for i in range(11)})
    body = {"model": "d-1", "state": request.state, "questions": request.questions}
    assert dense_body(body) == before(body)


@pytest.mark.parametrize("content", ["plain " * 1000, "line\n" * 1000, "naïve ✓ \"q\" \\ " * 300, "\x00" * 3000])
async def test_the_provider_receives_the_bytes_json_dumps_gave(fake_provider: Any, content: str) -> None:
    from compactor.providers import http

    body = {"model": "m", "messages": [{"role": "user", "content": content}]}
    await http.post_json(fake_provider.base_url + "/chat/completions", body, headers={}, timeout_s=10,
                         max_body_bytes=1 << 20)
    await http.aclose_client()
    assert fake_provider.requests[-1].body == before(body)
