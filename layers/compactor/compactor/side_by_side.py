"""Blocking requests made side by side: a store's reads and writes that depend on nothing each other does.

Each S3 request is a round trip (tens of milliseconds), and a request of the service or a job's step that makes
them one after another waits for every one in turn: 128 originals of a restorable request waited 128 round
trips (docs/performance.md, "Restorable archives"). :func:`side_by_side` makes them on threads of its own call
(another request's calls never queue behind them), at most ``at_once`` in flight, and hands the results back in
order. botocore's clients are thread-safe; the container's S3 client keeps 64 connections.
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

A = TypeVar("A")
T = TypeVar("T")


def side_by_side(call: Callable[[A], T], args: Iterable[A], *, at_once: int) -> Iterator[T]:
    """``call(arg)`` for each of ``args``, the results in the order of ``args``, with up to ``at_once`` calls in
    flight, each with the caller's context variables. Lazy: ``args`` is read as the results are taken, so no more
    than ``at_once`` calls' arguments and results are held besides the result being taken (a job's windows are
    megabytes each). A failed call's error is raised where its result would come, once the calls in flight have
    ended; the calls not started yet are not made."""
    pending: deque[Future[T]] = deque()
    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="compactor-side-by-side") as pool:
        try:
            for arg in args:
                pending.append(pool.submit(contextvars.copy_context().run, call, arg))
                if len(pending) >= at_once:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()  # not started: never made (the pool's exit waits for those in flight)


def each_side_by_side(call: Callable[[A], T], args: Iterable[A], *, at_once: int) -> list[T]:
    """``list(side_by_side(call, args, at_once=at_once))``, without threads for a single call."""
    items = list(args)
    if len(items) <= 1:
        return [call(arg) for arg in items]
    return list(side_by_side(call, items, at_once=at_once))
