"""Per-container singletons: the catalog's router and one event loop for the sync front doors; what a
container's init loaded is kept out of the cyclic garbage collector's passes.

A Lambda container serves requests one after another on one thread, so one long-lived event loop lets
the pooled HTTP client (bound to its loop) survive between invocations.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Coroutine
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
