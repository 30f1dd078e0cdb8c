"""``jsonutil.strict_loads_utf8`` and ``utf8_safe``: what a provider sends reaches an answer only as text UTF-8 can
carry (docs/reliability.md "Bounded answers")."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.jsonutil import StrictJSONError, strict_loads_utf8, utf8_safe


@pytest.mark.parametrize("data", [
    b'{"a": "caf\xc3\xa9 \xf0\x9f\x98\x80"}', '{"a": "café 😀"}', b'\xef\xbb\xbf{"a": 1}',
    json.dumps({"a": "café 😀"}).encode(),  # a surrogate pair escaped: one character, fine
    b'{"a": "\\\\ud800"}',  # an escaped backslash, then text
])
def test_utf8_json_text_is_read(data: str | bytes) -> None:
    raw = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    assert strict_loads_utf8(data) == json.loads(raw)


@pytest.mark.parametrize(("data", "message"), [
    (b'{"a": "x\xed\xa0\x80y"}', "not UTF-8 text"),  # a surrogate encoded as UTF-8: json.loads took it
    (b'{"a": "\xff"}', "not UTF-8 text"),
    ('{"a": "x\ud800"}', "lone surrogate"),
    (b'{"a": "x\\ud800y"}', "lone surrogate"),
    (b'{"\\udfff": 1}', "lone surrogate"),
    (b'{"a": [{"b": "\\uDBFF"}]}', "lone surrogate"),
    (b'{"a": 1, "a": 2}', "duplicate"),
])
def test_text_utf8_cannot_carry_is_refused(data: str | bytes, message: str) -> None:
    with pytest.raises(StrictJSONError, match=message):
        strict_loads_utf8(data)


def test_utf8_safe_replaces_only_lone_surrogates() -> None:
    assert utf8_safe("plain") == "plain"
    assert utf8_safe("café 😀") == "café 😀"
    assert utf8_safe("boom x\ud800y") == "boom x?y"


_PADDING = "x" * 9000  # past the length up to which an answer's text is searched for a surrogate's escape


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("data", [
    b'{"a": "x\\ud800y"}', b'{"\\udfff": 1}', b'{"a": [{"b": "\\uDBFF"}]}', '{"a": ["\\ud83d"]}',
    b'{"a": "\\\\\\ud800"}',  # an escaped backslash, then the escape
])
def test_an_escaped_lone_surrogate_is_refused_in_short_and_long_answers(data: str | bytes, padded: bool) -> None:
    """Short answers are searched for the escape, long ones walked (docs/performance.md): either refuses it."""
    if padded:
        pad = f', "pad": "{_PADDING}"}}'
        data = data[:-1] + (pad.encode() if isinstance(data, bytes) else pad)
    with pytest.raises(StrictJSONError, match="lone surrogate"):
        strict_loads_utf8(data)


@pytest.mark.parametrize("padded", [False, True])
def test_escapes_that_are_text_are_read_in_short_and_long_answers(padded: bool) -> None:
    text = json.dumps({"a": "café 😀 \\ud800", "b": ["\u2028", "\\\\u"], "pad": _PADDING if padded else ""})
    assert strict_loads_utf8(text.encode()) == json.loads(text)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "é", ""]), st.integers()), max_size=8))
def test_the_duplicate_key_check_in_c_is_the_loops(pairs: list[tuple[str, int]]) -> None:
    """``_no_duplicates`` builds the object in C and looks at the keys one by one only when one repeats: the same
    object, or the same error naming the first key that repeats, as the loop it replaced."""
    from compactor.jsonutil import _no_duplicates

    def by_loop(pairs: list[tuple[str, int]]) -> object:
        out: dict[str, int] = {}
        for key, value in pairs:
            if key in out:
                return ("error", f"duplicate key: {key!r}")
            out[key] = value
        return out

    try:
        outcome: object = _no_duplicates(pairs)
    except StrictJSONError as exc:
        outcome = ("error", str(exc))
    assert outcome == by_loop(pairs)
