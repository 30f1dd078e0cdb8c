"""Per-container singletons: the catalog's router and one event loop for the sync front doors; what a
container's init loaded is kept out of the cyclic garbage collector's passes (and the layer's own modules
are imported without them, :func:`collector_paused`).

A Lambda container serves requests one after another on one thread, so one long-lived event loop lets
the pooled HTTP client (bound to its loop) survive between invocations.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from compactor.router import Router

T = TypeVar("T")

_loop_local = threading.local()


class PerContainer(Generic[T]):
    """A value built on first use and then shared by every request of the container (thread-safe);
    :meth:`reset` forgets it (tests that switch configurations, SnapStart restores)."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self.value: T | None = None

    def get(self) -> T:
        value = self.value
        if value is None:
            with self._lock:
                if self.value is None:
                    self.value = self._build()
                value = self.value
        return value

    def reset(self) -> None:
        with self._lock:
            self.value = None


def _configured_router() -> Router:
    from compactor.catalog import get_catalog
    from compactor.providers.registry import transport_for
    from compactor.router import Router

    catalog = get_catalog()
    return Router(catalog.offers, envelope=catalog.policy_envelope, transport_for=transport_for)


ROUTER: PerContainer[Router] = PerContainer(_configured_router)
get_router = ROUTER.get
"""The router over the configured catalog, built once per container."""
reset_router = ROUTER.reset


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on this thread's long-lived event loop."""
    loop = getattr(_loop_local, "loop", None)
    if loop is None or loop.is_closed():
        import asyncio  # not at the top: handlers import this module before collector_paused, asyncio in it

        loop = asyncio.new_event_loop()
        _loop_local.loop = loop
    return loop.run_until_complete(coro)


def freeze_init_objects() -> None:
    """Called at the end of a Lambda handler module's init: everything loaded so far (modules, classes,
    the resolver, the libraries' tables) lives as long as the container, so the cyclic collector stops
    scanning it (:func:`gc.freeze`). A full collection, which the first request's allocations trigger
    and which otherwise scans every object of every imported package (20-40 ms for the API function),
    then scans only what was allocated since (docs/performance.md#the-collector-after-init)."""
    gc.freeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Around a handler's imports of the layer's own modules (its third-party packages imported before it):
    the cyclic collector makes no pass while they load, and what they loaded is frozen when the block ends
    (:func:`gc.freeze`, as :func:`freeze_init_objects` does at the end of init). Their modules, classes,
    records and tables live as long as the container, so the young and middle passes that their allocations
    would trigger (a few ms of a cold start) scan them for nothing. The collector is enabled again after the
    block unless it was already off; if an import fails nothing is frozen
    (docs/performance.md#the-workers-cold-start-eighth-round-issue-11)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if enabled:
            gc.enable()
