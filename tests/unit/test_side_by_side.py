"""``compactor.side_by_side``: blocking calls on threads of the call's own, results in order, bounded."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from compactor.side_by_side import InFlight, each_side_by_side, side_by_side

TAG: contextvars.ContextVar[str | None] = contextvars.ContextVar("tag", default=None)


class Gauge:
    """Counts the calls in flight at once; each call sleeps ``delay_s`` (a later argument sleeps less, so the
    answers come back out of order)."""

    def __init__(self, delay_s: float = 0.02) -> None:
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.made: list[int] = []

    def __call__(self, value: int) -> int:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.made.append(value)
        try:
            time.sleep(self.delay_s / (1 + value % 4))
            if value < 0:
                raise ValueError(f"bad {value}")
            return value * 10
        finally:
            with self.lock:
                self.in_flight -= 1


def test_results_come_in_order_with_at_most_at_once_in_flight() -> None:
    gauge = Gauge()

    assert list(side_by_side(gauge, range(20), at_once=4)) == [value * 10 for value in range(20)]
    assert gauge.most == 4


def test_calls_overlap() -> None:
    barrier = threading.Barrier(5, timeout=10)  # one call after another would break it

    assert list(side_by_side(lambda value: barrier.wait() * 0 + value, range(5), at_once=5)) == list(range(5))


def test_the_arguments_are_read_as_the_results_are_taken() -> None:
    read: list[int] = []

    def args():
        for value in range(100):
            read.append(value)
            yield value

    results = side_by_side(lambda value: value, args(), at_once=3)
    assert next(results) == 0
    assert len(read) == 3  # no more than at_once ahead of the result taken
    results.close()


def test_an_error_comes_where_its_result_would_and_the_arguments_after_are_not_read() -> None:
    gauge = Gauge()
    read: list[int] = []
    taken = []

    def args():
        for value in [0, 1, -1, *range(2, 40)]:
            read.append(value)
            yield value

    with pytest.raises(ValueError, match="bad -1"):
        for result in side_by_side(gauge, args(), at_once=2):
            taken.append(result)

    assert taken == [0, 10]
    assert read == [0, 1, -1, 2] and sorted(gauge.made) == sorted(read)  # at_once - 1 started after it, no more
    assert gauge.in_flight == 0  # the calls in flight ended before the error came


def test_every_call_has_the_callers_context() -> None:
    token = TAG.set("request-7")
    try:
        assert set(each_side_by_side(lambda _: TAG.get(), range(6), at_once=3)) == {"request-7"}
    finally:
        TAG.reset(token)


def test_a_single_call_runs_on_the_callers_thread() -> None:
    assert each_side_by_side(lambda _: threading.get_ident(), ["x"], at_once=8) == [threading.get_ident()]
    assert each_side_by_side(lambda _: 1, [], at_once=8) == []


def test_the_calls_in_flight_weigh_at_most_max_weight_but_for_the_last_started() -> None:
    gauge = Gauge()

    assert list(side_by_side(gauge, range(12), at_once=8, weight=lambda _: 2, max_weight=4)) == [
        value * 10 for value in range(12)]
    assert gauge.most == 3  # two within the weight, and the one started before the oldest is taken


def test_no_call_starts_beside_one_heavier_than_max_weight_until_its_result_is_taken() -> None:
    gauge = Gauge()
    taken = []

    for result in side_by_side(gauge, [0, 1, 2, 3, 4], at_once=8, weight=lambda value: 100 if value == 2 else 1,
                               max_weight=10):
        taken.append((result, gauge.in_flight))

    assert [result for result, _ in taken] == [0, 10, 20, 30, 40]
    assert taken[2][1] == 0  # when the heavy call's result came, no later call had started


def test_pushed_calls_overlap_and_their_results_come_in_push_order() -> None:
    gauge = Gauge()
    barrier = threading.Barrier(3, timeout=10)  # one call after another would break it
    calls = InFlight[int](3)

    for value in range(3):
        calls.push(lambda v: barrier.wait() * 0 + gauge(v), value)
    for value in range(3, 12):
        calls.push(gauge, value)

    assert calls.results() == [value * 10 for value in range(12)]
    assert gauge.most == 3 and calls.pool is None  # its threads end with the results


def test_a_push_waits_for_the_oldest_call_when_at_once_are_in_flight_and_raises_its_error() -> None:
    gauge = Gauge()
    calls = InFlight[int](2)
    calls.push(gauge, 0)
    calls.push(gauge, -1)

    with pytest.raises(ValueError, match="bad -1"):
        for value in range(1, 10):
            calls.push(gauge, value)

    calls.close()
    assert sorted(gauge.made) == [-1, 0, 1]  # the push that met the failed call raised its error, started nothing
    assert gauge.in_flight == 0 and calls.pool is None


def test_results_raise_a_failed_calls_error_and_close_waits_for_the_rest() -> None:
    gauge = Gauge(delay_s=0.1)
    calls = InFlight[int](4)
    for value in (-3, 1, 2, 5):
        calls.push(gauge, value)

    with pytest.raises(ValueError, match="bad -3"):
        calls.results()
    calls.close()

    assert gauge.in_flight == 0 and sorted(gauge.made) == [-3, 1, 2, 5]


def test_no_thread_starts_before_the_first_push_and_pushed_calls_have_the_callers_context() -> None:
    calls = InFlight[str | None](2)
    assert calls.pool is None and calls.results() == []
    token = TAG.set("request-9")
    try:
        for _ in range(4):
            calls.push(TAG.get)
    finally:
        TAG.reset(token)
    assert calls.results() == ["request-9"] * 4


def test_a_failed_calls_error_is_raised_again_by_every_later_push_and_by_results() -> None:
    gauge = Gauge()
    calls = InFlight[int](1)
    calls.push(gauge, -2)

    for _ in range(3):  # a caller that catches the error cannot go on as if the call had been made
        with pytest.raises(ValueError, match="bad -2"):
            calls.push(gauge, 7)
    with pytest.raises(ValueError, match="bad -2"):
        calls.results()
    calls.close()

    assert gauge.made == [-2]
