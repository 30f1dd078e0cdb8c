"""``paired_split`` (docs/formats.md, docs/performance.md): the units of a format whose calls and results are items
paired by id, and the calls answered late with their late answers, in work linear in the items however late the
calls are answered. Its output is the one of the quadratic algorithm it replaced (kept here, as the reference) on
thousands of random transcripts of every shape the units depend on."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from compactor.compaction.units import Unit
from compactor.formats import get_dialect
from compactor.formats.base import last_answers, paired_split

from scale import transcripts

ANTHROPIC = get_dialect("anthropic-messages")
RESPONSES = get_dialect("openai-responses")


# -- the reference: the algorithm as it was, quadratic when calls are answered late ---------------------------------


def reference_split(items: Any, *, opens: Callable[[Any], set[str]], closes: Callable[[Any], set[str]],
                    leads: Callable[[Any], bool], same_turn: Callable[[Any, Any], bool],
                    links: tuple[Mapping[int, set[str]], Mapping[int, set[str]]] = ({}, {}),
                    turn_start: Callable[[Any], bool] = lambda item: False) -> tuple[list[Unit], set[int]]:
    also_opens, also_closes = links
    opened = [opens(item) | also_opens.get(index, set()) for index, item in enumerate(items)]
    closed = [closes(item) | also_closes.get(index, set()) for index, item in enumerate(items)]
    answered_by = last_answers(opened, closed)
    units: list[Unit] = []
    late: set[int] = set()
    i, n = 0, len(items)
    while i < n:
        pending = opened[i] - closed[i]
        reach = answered_by[i]
        end = i + 1
        while end < n:
            prev, nxt = items[end - 1], items[end]
            answered = closed[end]
            if not (leads(prev) or same_turn(prev, nxt) or (pending and (opened[end] or answered & pending))):
                if end > reach:
                    break
                calls = set().union(*opened[i:end])
                if _reference_other_work(items, end, reach, answered_by, closed, calls, turn_start):
                    late |= _reference_late_pairs(opened, closed, answered_by, i, end)
                    break
            pending = (pending | opened[end]) - answered
            reach = max(reach, answered_by[end])
            end += 1
        units.append(Unit(i, end))
        i = end
    return units, late


def _reference_other_work(items: Any, start: int, reach: int, answered_by: list[int], closed: list[set[str]],
                          calls: set[str], turn_start: Callable[[Any], bool]) -> bool:
    turn = False
    for k in range(start, reach):
        if k < answered_by[k] < reach or (turn and not closed[k] & calls):
            return True
        turn = turn or turn_start(items[k])
    return False


def _reference_late_pairs(opened: list[set[str]], closed: list[set[str]], answered_by: list[int], start: int,
                          end: int) -> set[int]:
    late: set[int] = set()
    for k in range(start, end):
        if answered_by[k] < end:
            continue
        late.add(k)
        calls = opened[k] - closed[k]
        late |= {m for m in range(end, answered_by[k] + 1) if closed[m] & calls}
    return late


# -- random transcripts of abstract items ---------------------------------------------------------------------------


def _opens(item: dict[str, Any]) -> set[str]:
    return set(item["o"])


def _closes(item: dict[str, Any]) -> set[str]:
    return set(item["c"])


def _leads(item: dict[str, Any]) -> bool:
    return item["lead"]


def _same_turn(prev: dict[str, Any], nxt: dict[str, Any]) -> bool:
    return prev["turn"] is not None and prev["turn"] == nxt["turn"]


def _human(item: dict[str, Any]) -> bool:
    return item["human"]


RULES = {"opens": _opens, "closes": _closes, "leads": _leads, "same_turn": _same_turn, "turn_start": _human}


def _item(opens: list[str] = (), closes: list[str] = (), lead: bool = False, turn: str | None = None,
          human: bool = False) -> dict[str, Any]:
    return {"o": list(opens), "c": list(closes), "lead": lead, "turn": turn, "human": human}


def _random_items(rng: random.Random) -> tuple[list[dict[str, Any]], tuple[dict[int, set[str]], dict[int, set[str]]]]:
    """Calls answered at once, late (past other calls, messages, human turns), twice, never; results of no call;
    parallel calls; ids reused; items leading into the next; turns of several items; links between items."""
    items: list[dict[str, Any]] = []
    opened: list[str] = []
    pool = rng.randint(2, 12)
    for _ in range(rng.randint(0, rng.choice([8, 30, 80]))):
        draw = rng.random()
        if draw < 0.15:
            items.append(_item(human=True, closes=[rng.choice(opened)] if opened and rng.random() < 0.2 else []))
        elif draw < 0.45:
            calls = [f"c{rng.randrange(pool)}" for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]
            opened += calls
            items.append(_item(opens=calls, lead=rng.random() < 0.1, turn=rng.choice([None, None, "r1", "r2"])))
        elif draw < 0.6:
            items.append(_item(lead=rng.random() < 0.3, turn=rng.choice([None, "r1"])))
        else:
            answers = []
            for _ in range(rng.choice([1, 1, 2])):
                if opened and rng.random() < 0.85:  # an open call, often an early one (a late answer)
                    answers.append(opened[min(len(opened) - 1, int(rng.random() ** 2 * len(opened)))]
                                   if rng.random() < 0.5 else rng.choice(opened[-3:]))
                else:
                    answers.append(f"c{rng.randrange(pool)}")  # a result of no call (or of one never made yet)
            items.append(_item(closes=answers, human=rng.random() < 0.05))
    opens_links: dict[int, set[str]] = {}
    closes_links: dict[int, set[str]] = {}
    for link in range(rng.choice([0, 0, 1, 2])):
        if len(items) >= 2:
            first, last = sorted(rng.sample(range(len(items)), 2))
            opens_links.setdefault(first, set()).add(f"link{link}")
            closes_links.setdefault(last, set()).add(f"link{link}")
    return items, (opens_links, closes_links)


def test_the_split_is_the_reference_splits_on_random_transcripts():
    rng = random.Random(47)
    for _ in range(4000):
        items, links = _random_items(rng)
        assert paired_split(items, links=links, **RULES) == reference_split(items, links=links, **RULES), (items, links)


def test_the_anthropic_units_and_late_pairs_are_the_reference_ones():
    """Through the dialect, whole and as a stream's facts: the units and the late pairs as they were."""
    from compactor.formats import anthropic_messages as module

    rng = random.Random(9)
    for _ in range(1500):
        items = transcripts.random_anthropic(rng)
        expected = reference_split(items, opens=module._opens, closes=module._closes, leads=module._hidden_only,
                                   same_turn=module._same_turn, turn_start=module._human,
                                   links=module._response_links(items))
        assert ANTHROPIC.paired(items) == expected, items
        facts = ANTHROPIC.stream_facts()
        for item in items:
            facts.add(item)
        assert facts.units() == expected[0], items


# -- the work it does: linear in the items, however late the calls are answered ------------------------------------


def _one_late(n: int) -> list[dict[str, Any]]:
    """A call answered after ``n`` items of no other work."""
    return [_item(opens=["late"]), *(_item() for _ in range(n)), _item(closes=["late"])]


def _many_late(n: int) -> list[dict[str, Any]]:
    """``n`` calls, each followed by a message, answered after a human turn at the end: each is answered late."""
    items = [item for k in range(n) for item in (_item(opens=[f"c{k}"]), _item())]
    return [*items, _item(human=True), _item(), *(_item(closes=[f"c{k}"]) for k in range(n))]


def _parallel(n: int) -> list[dict[str, Any]]:
    """``n`` calls in a row, then their ``n`` results."""
    return [*(_item(opens=[f"c{k}"]) for k in range(n)), *(_item(closes=[f"c{k}"]) for k in range(n))]


class _Ids(set):
    """An item's ids that count the ids of every new set made from them: the work of keeping a unit's calls."""

    copied = 0

    def _counted(self, result: set) -> "_Ids":
        _Ids.copied += len(result)
        return _Ids(result)

    def __or__(self, other: Any) -> "_Ids":
        return self._counted(set(self) | set(other))

    def __sub__(self, other: Any) -> "_Ids":
        return self._counted(set(self) - set(other))


@pytest.mark.parametrize("shape", [_one_late, _many_late, _parallel])
def test_the_work_is_linear_in_the_items_however_late_the_calls_are_answered(shape):
    """Each human-turn question is asked of an item once, and the set of a unit's open calls is not copied for each
    item: on these 1,500 to 4,500 items, the old algorithm asked millions of times (it read all that lies between a
    call and its late answer again for each item it took in) and copied millions of ids."""
    items = shape(1_500)
    asked = []

    def turn_start(item: dict[str, Any]) -> bool:
        asked.append(item)
        return item["human"]

    _Ids.copied = 0
    units, late = paired_split(items, opens=lambda item: _Ids(item["o"]), closes=lambda item: _Ids(item["c"]),
                               leads=_leads, same_turn=_same_turn, turn_start=turn_start)
    assert len(asked) <= len(items) and _Ids.copied <= 4 * len(items), (len(asked), _Ids.copied)
    assert (units, late) == reference_split(items, **RULES)


def test_an_id_reused_in_every_late_answered_unit_gives_the_reference_late_pairs():
    """One call id in every unit, each answered after a human turn and a message: its late pairs are the reference's
    (the read for late answers takes each id's spans as it reaches them; tests/benchmarks/late_answers.py times it)."""
    items = [item for _ in range(300) for item in (_item(opens=["x"]), _item(human=True), _item(), _item(closes=["x"]))]
    units, late = paired_split(items, **RULES)
    assert (units, late) == reference_split(items, **RULES)
    assert len(late) == 600
