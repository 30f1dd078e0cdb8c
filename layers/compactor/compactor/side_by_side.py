"""Blocking requests made side by side: a store's reads and writes that depend on nothing each other does.

Each S3 request is a round trip (tens of milliseconds), and a request of the service or a job's step that makes
them one after another waits for every one in turn: 128 originals of a restorable request waited 128 round
trips (docs/performance.md, "Restorable archives"). :func:`side_by_side` makes them on threads of its own call
(another request's calls never queue behind them), at most ``at_once`` in flight, and hands the results back in
order. The store's client must be thread-safe (botocore's are; the container's S3 client keeps 64 connections,
``compactor_aws/s3_store.py``).

The threads carry the caller's context variables (the same objects, not copies), not its thread-local state: a
tracer that keeps its current segment per thread (the X-Ray SDK's, on Lambda) records these calls beside the
request's segment rather than under it.
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

A = TypeVar("A")
T = TypeVar("T")


def side_by_side(call: Callable[[A], T], args: Iterable[A], *, at_once: int,
                 weight: Callable[[A], int] | None = None, max_weight: int | None = None) -> Iterator[T]:
    """``call(arg)`` for each of ``args``, the results in the order of ``args``, with up to ``at_once`` calls in
    flight. Lazy: ``args`` is read as the results are taken, so no more than ``at_once`` calls' arguments and
    results are held besides the result being taken (a job's windows are megabytes each). With ``weight`` and
    ``max_weight``, the calls in flight also weigh at most ``max_weight`` together, but for the last one started
    (a call heavier than that runs with none but the ones before it, which are then taken first). A failed
    call's error is raised where its result would come, once the calls in flight (up to ``at_once`` - 1 started
    after it) have ended; the arguments after those are not read, and their calls not made."""
    pending: deque[tuple[Future[T], int]] = deque()
    held = 0
    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="compactor-side-by-side") as pool:
        for arg in args:  # never more calls pending than threads: each starts when submitted
            heft = weight(arg) if weight is not None else 0
            pending.append((pool.submit(contextvars.copy_context().run, call, arg), heft))
            held += heft
            while pending and (len(pending) >= at_once or (max_weight is not None and held > max_weight)):
                future, done_heft = pending.popleft()
                held -= done_heft
                yield future.result()
        while pending:
            yield pending.popleft()[0].result()


def each_side_by_side(call: Callable[[A], T], args: Iterable[A], *, at_once: int) -> list[T]:
    """``list(side_by_side(call, args, at_once=at_once))``, without threads for a single call."""
    items = list(args)
    if len(items) <= 1:
        return [call(arg) for arg in items]
    return list(side_by_side(call, items, at_once=at_once))


class InFlight(Generic[T]):
    """The push form of :func:`side_by_side`, for calls made as a caller produces their arguments (a writer's
    parts as its text comes): :meth:`push` starts a call on a thread of this object's own, first waiting for the
    oldest call in flight when ``at_once`` are (:meth:`make_room`), and :meth:`results` waits for the rest and
    returns every result in push order. A failed call's error is raised by the first of these to take its result,
    and again by every later one: a caller that catches it cannot go on as if the call had been made. :meth:`close`
    waits for the calls in flight and drops their results and errors (a caller giving up, as a writer's abort). No
    thread is started before the first push."""

    def __init__(self, at_once: int) -> None:
        self.at_once = at_once
        self.pending: deque[Future[T]] = deque()
        self.done: list[T] = []
        self.pool: ThreadPoolExecutor | None = None
        self.failed: BaseException | None = None

    def make_room(self) -> None:
        """Wait until fewer than ``at_once`` calls are in flight (a caller about to make the next argument holds
        no more than that and the calls in flight)."""
        while len(self.pending) >= self.at_once:  # never more calls pending than threads: each starts when pushed
            self._take()
        if self.failed is not None:
            raise self.failed

    def push(self, call: Callable[..., T], *args: Any) -> None:
        self.make_room()
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.at_once, thread_name_prefix="compactor-in-flight")
        self.pending.append(self.pool.submit(contextvars.copy_context().run, call, *args))

    def results(self) -> list[T]:
        while self.pending:
            self._take()
        if self.failed is not None:
            raise self.failed
        self.close()
        return self.done

    def _take(self) -> None:
        try:
            self.done.append(self.pending.popleft().result())
        except BaseException as exc:
            self.failed = self.failed or exc
            raise

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)  # the calls in flight end; their outcomes stay in the futures, unread
            self.pool = None
        self.pending.clear()
