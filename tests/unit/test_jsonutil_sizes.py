"""The sizes the hot path computes instead of encoding (docs/performance.md) equal, or bound, the encodings."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.jsonutil import (ascii_dumps, dense_dumps, dense_size, dense_size_bound, dense_str_size, json_text_escaped, json_text_size,
                                spaced_dumps)
from compactor.router import tokens_bound, estimate_tokens

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**19, max_value=10**19)
    | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(_text, inner, max_size=6),
    max_leaves=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_json)
def test_the_reused_encoders_write_what_json_dumps_writes(value):
    assert dense_dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert ascii_dumps(value) == json.dumps(value, allow_nan=False)
    assert spaced_dumps(value) == json.dumps(value, ensure_ascii=False)
    assert dense_size(value) == len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def test_the_reused_encoders_refuse_what_json_dumps_refuses():
    shared = {"a": 1}
    assert dense_dumps([shared, shared, {"b": shared}]) == '[{"a":1},{"a":1},{"b":{"a":1}}]'
    for bad, error in ((float("nan"), ValueError), ([float("inf")], ValueError), ({"a": {1, 2}}, TypeError),
                       ({("k",): 1}, TypeError)):
        for encode in (dense_dumps, ascii_dumps):
            with pytest.raises(error):
                encode(bad)
    assert spaced_dumps([float("nan"), -float("inf"), "é"]) == '[NaN, -Infinity, "é"]'
    assert dense_dumps({1: "é", None: 2.5}) == '{"1":"é","null":2.5}' and ascii_dumps("é") == '"\\u00e9"'


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_json)
def test_json_text_size_is_the_size_of_quoting_json_text(value):
    for text in (dense_dumps(value), ascii_dumps(value)):
        assert json_text_size(text) == dense_size(text)
        assert json_text_size(text[: len(text) // 2]) == dense_size(text[: len(text) // 2])
        for cut in (text, text[: len(text) // 2]):
            assert '"' + json_text_escaped(cut) + '"' == dense_dumps(cut)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_json)
def test_the_size_bound_is_never_below_the_size(value):
    assert dense_size(value) <= dense_size_bound(value)
    assert estimate_tokens(value) <= tokens_bound(value)
    if isinstance(value, str):
        assert estimate_tokens(value) <= tokens_bound(value)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_json)
def test_a_decision_request_s_wire_size_bounds_its_token_estimate(state):
    from compactor.providers.base import DecisionRequest
    from compactor.router import decision_request_bound, decision_request_tokens

    questions = {"q": {"type": "noul", "instructions": "Is it so?"}}
    request = DecisionRequest(state=state, questions=questions,
                              wire_bytes=len(ascii_dumps({"state": state, "questions": questions})))
    assert decision_request_tokens(request) <= decision_request_bound(request)


def test_no_bound_for_what_is_not_plain_json():
    assert dense_size_bound({1: "a"}) is None
    assert dense_size_bound([float("nan")]) is None
    assert dense_size_bound(("a",)) is None
    assert dense_size_bound(10**30) is None
    assert dense_size_bound({"a": ["b", 1, 2.5, None, True]}) >= dense_size({"a": ["b", 1, 2.5, None, True]})


async def test_the_context_check_uses_the_estimate_wherever_the_bound_does_not_settle_it():
    from compactor.policy import DEFAULT_CHAT_POLICY
    from compactor.providers.base import ChatRequest, ChatResponse, Offer
    from compactor.router import CONTEXT_REJECTION, Router, chat_request_bound, chat_request_tokens

    class Transport:
        async def chat(self, offer, request, timeout_s):
            return ChatResponse(text="ok", finish_reason="stop", tokens_in=1, tokens_out=1)

    request = ChatRequest([{"role": "user", "content": "word " * 1000}], max_tokens=50)
    exact, bound = chat_request_tokens(request), chat_request_bound(request)
    assert exact < bound
    for context, fits in ((bound, True), ((exact + bound) // 2, True), (exact, True), (exact - 1, False)):
        offer = Offer(id="o", provider="p", family="f", model="m", protocol="chat", transport="t",
                      price_in=0.0, price_out=0.0, observations={"context": context})
        router = Router([offer], transport_for=lambda offer: Transport())
        result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), request)
        assert result.ok is fits, context
        if not fits:
            assert result.trace["rejected"] == [{"offer": "o", "reason": CONTEXT_REJECTION, "estimated_tokens": exact}]



def _utf8_check_by_encoding(value):
    """The lone-surrogate check as first written: the whole value serialised and encoded."""
    try:
        dense_dumps(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        where = ""  # a list names its first item holding one (a transcript's message)
        for index, item in enumerate(value if type(value) is list else []):
            try:
                dense_dumps(item).encode("utf-8")
            except UnicodeEncodeError:
                where = f" in its item {index}"
                break
            except (TypeError, ValueError):
                break
        raise ValueError("text must be valid Unicode: it contains a lone surrogate "
                         f"(\\u{ord(exc.object[exc.start]):04x}){where}") from None


def _outcome(check, value):
    try:
        check(value)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return type(exc), str(exc)
    return None


_any_text = st.text(max_size=8) | st.sampled_from(["\ud800", "a\udfff", "é", "😀", "x"])
_anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _any_text | st.just(("a", "\udc00")) | st.just({1})
    | st.sampled_from([10**1204, -(10**1204), 2**4000, 2**4001]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_any_text | st.integers() | st.none(), inner,
                                                                max_size=4),
    max_leaves=20)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(_anything)
def test_the_lone_surrogate_check_looks_at_strings_and_raises_what_encoding_raises(value):
    from compactor.jsonutil import ensure_utf8_encodable

    assert _outcome(ensure_utf8_encodable, value) == _outcome(_utf8_check_by_encoding, value)
    shared = {"k": value}
    assert _outcome(ensure_utf8_encodable, [shared, shared]) == _outcome(_utf8_check_by_encoding, [shared, shared])


def test_an_int_past_the_digit_limit_is_refused_as_encoding_refuses_it():
    from compactor.jsonutil import ensure_utf8_encodable

    for value in ([10**5000], {"k": -(10**4400)}, [2**4001, "é"]):
        assert _outcome(ensure_utf8_encodable, value) == _outcome(_utf8_check_by_encoding, value)
    assert _outcome(ensure_utf8_encodable, [10**5000])[0] is ValueError


_escapes = st.text(alphabet=st.sampled_from(['a', ' ', '"', "\\", "\n", "\t", "\r", "\b", "\f", "\x00", "\x01", "\x1f",
                                             "\x7f", "/", "é", "😀"]), max_size=300)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_escapes | _text)
def test_the_size_of_a_string_measured_without_encoding_it_is_its_dense_size(text):
    """``dense_str_size`` counts the escapes of an ASCII string instead of encoding it (docs/performance.md)."""
    assert dense_str_size(text) == dense_size(text) == len(json.dumps(text, separators=(",", ":"),
                                                                       ensure_ascii=False).encode("utf-8"))


def _strict_loads_by_definition(text: str | bytes) -> tuple[str, object]:
    """``strict_loads`` as first written: ``json.loads`` with its hooks on every call."""
    from compactor import jsonutil

    try:
        return "ok", json.loads(text, object_pairs_hook=jsonutil._no_duplicates,
                                parse_constant=jsonutil._reject_constant, parse_float=jsonutil._finite_float)
    except jsonutil.StrictJSONError as exc:
        return "strict", str(exc)
    except (ValueError, RecursionError) as exc:
        return "strict", str(exc)  # strict_loads wraps these in StrictJSONError with the same text


_JSON_PIECES = st.sampled_from(['{"a": 1, "a": 2}', '{"a": NaN}', '[Infinity]', '1e999', '{"k": [1, 2.5, "x"]}',
                                '\ufeff{"a": 1}', '"\\ud800"', '{"a": {"b": null}}', '[', '{"a" 1}', ' 7 ', '',
                                '{"é": "ü"}', '[1, 2] x'])


@settings(max_examples=200, deadline=None)
@given(st.one_of(_JSON_PIECES, st.text(max_size=12),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                              lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                          max_size=3),
                              max_leaves=8).map(json.dumps)),
       st.booleans())
def test_strict_loads_with_one_decoder_equals_json_loads_with_its_hooks(text: str, as_bytes: bool) -> None:
    from compactor.jsonutil import StrictJSONError, strict_loads

    given_text = text.encode("utf-8", "surrogatepass") if as_bytes else text
    try:
        outcome = ("ok", strict_loads(given_text))
    except StrictJSONError as exc:
        outcome = ("strict", str(exc))
    assert repr(outcome) == repr(_strict_loads_by_definition(given_text))


# Every ASCII character, and the escapes' own text (a literal ``\x41`` or ``\u0041``), in contents of any length.
_ascii_content = (st.lists(st.sampled_from([chr(code) for code in range(128)] + ["\\x41", "\\u0041", '\\"', "é"]),
                           max_size=80).map("".join)
                  | st.tuples(st.text(alphabet='ab "\\\n\t\r', max_size=20), st.sampled_from(
                      [chr(code) for code in [*range(32), 127]]), st.text(alphabet="ab x41", max_size=5)).map("".join))


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(_ascii_content,
       st.sampled_from([{}, {"role": "tool", "tool_call_id": 'c"1\x7f'}, {"text": 1, "n": [1.5], "é": None}]),
       st.integers(min_value=0, max_value=3))
def test_a_content_the_codec_escapes_plainly_is_written_as_the_encoder_writes_it(text, members, position):
    """``dense_plain_str`` (the ``unicode_escape`` codec, docs/performance.md) writes what the encoder writes for
    every ASCII string the names scan's translation passes (``escapes_plainly``), and that translation passes
    exactly the strings without a control character but tab, newline and return and without DEL; a message
    with such a content at any place is written around it as the encoder writes it, and the content's escaped
    text starts where ``dense_with_plain_member_at`` says (and, last, ends before the closing ``"}``)."""
    from compactor.compaction.salience import escapes_plainly, translated
    from compactor.jsonutil import dense_plain_str, dense_with_plain_member_at

    if not text.isascii():
        return
    odd = any(ord(c) < 0x20 and c not in "\t\n\r" or c == "\x7f" for c in text)
    assert escapes_plainly(translated(text)) is not odd
    if not odd:
        items = list(members.items())
        message = dict([*items[:position], ("content", text), *items[position:]])
        assert dense_plain_str(text) == dense_dumps(text)
        assert dense_with_plain_member_at(message, "content", text)[0] == dense_dumps(message) == json.dumps(
            message, separators=(",", ":"), ensure_ascii=False)
        dense, start = dense_with_plain_member_at(message, "content", text)
        escaped = dense_plain_str(text)[1:-1]
        assert dense == dense_dumps(message) and dense[start - 1:start + len(escaped) + 1] == f'"{escaped}"'
        assert dense[:start - 1].endswith('"content":')
        if position >= len(items):  # the content last
            assert dense[start:-2] == escaped and dense.endswith('"}')
