"""UTF-8 safe cutting and the section layout shared by the built-in offers."""

from __future__ import annotations

from compactor.offline.text_fit import (
    ELLIPSIS, Section, fit_end, fit_items, fit_middle, fit_sections, squeezed_window, utf8_len, utf8_prefix,
    utf8_suffix,
)

MIXED = "aé漢🙂" * 7 + "z"


def test_prefix_and_suffix_never_split_a_character() -> None:
    encoded = MIXED.encode("utf-8")
    for limit in range(len(encoded) + 2):
        head, tail = utf8_prefix(MIXED, limit), utf8_suffix(MIXED, limit)
        assert MIXED.startswith(head) and MIXED.endswith(tail)
        assert utf8_len(head) <= limit and utf8_len(tail) <= limit
        # maximal: one more character would not fit
        assert len(head) == len(MIXED) or utf8_len(MIXED[: len(head) + 1]) > limit
        assert len(tail) == len(MIXED) or utf8_len(MIXED[len(MIXED) - len(tail) - 1:]) > limit


def test_fits_respect_the_limit_and_mark_elisions() -> None:
    for limit in range(0, utf8_len(MIXED) + 3):
        for fitted in (fit_end(MIXED, limit), fit_middle(MIXED, limit)):
            assert utf8_len(fitted) <= limit
            assert "\ufffd" not in fitted
    assert fit_end("short", 10) == "short"
    assert fit_end("abcdefghij", 7) == "abcd" + ELLIPSIS
    assert fit_middle("abcdefghij", 9) == "abc" + ELLIPSIS + "hij"


def test_list_bodies_are_cut_between_items() -> None:
    assert fit_items("a/x.py, b/y.py, c/z.py", ", ", 19) == "a/x.py, b/y.py, " + ELLIPSIS
    assert fit_items("a/x.py, b/y.py, c/z.py", ", ", 18) == "a/x.py, " + ELLIPSIS
    assert fit_items("a/x.py, b/y.py", ", ", 40) == "a/x.py, b/y.py"


def test_sections_share_the_budget_in_priority_order() -> None:
    sections = [
        Section("call", "$ " + "c" * 300, 0.4),
        Section("exit", "1", 0.05),
        Section("output", "o" * 600, 0.4, elide_middle=True),
        Section("note", "", 0.0),
    ]
    for limit in (40, 64, 128, 256, 1000):
        text = fit_sections(sections, limit)
        assert utf8_len(text) <= limit
    text = fit_sections(sections, 256)
    lines = text.split("\n")
    assert [line.split(":")[0] for line in lines] == ["call", "exit", "output"]
    assert lines[1] == "exit: 1"
    assert ELLIPSIS in lines[0] and ELLIPSIS in lines[2]


def test_windows_of_huge_text_keep_head_and_tail() -> None:
    text = "HEAD  \n\n" + "x " * 100_000 + "\n TAIL"
    window = squeezed_window(text, 64)
    assert window.startswith("HEAD x") and window.endswith("x TAIL")
    assert len(window) < 1000
