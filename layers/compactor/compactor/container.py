"""Per-container singletons: the catalog's router and one event loop for the sync front doors.

A Lambda container serves requests one after another on one thread, so one long-lived event loop lets
the pooled HTTP client (bound to its loop) survive between invocations.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from compactor.router import Router

T = TypeVar("T")

_router: Router | None = None
_router_lock = threading.Lock()
_loop_local = threading.local()


def get_router() -> Router:
    """The router over the configured catalog, built once per container."""
    global _router
    if _router is None:
        with _router_lock:
            if _router is None:
                from compactor.catalog import get_catalog
                from compactor.providers.registry import transport_for

                catalog = get_catalog()
                _router = Router(catalog.offers, envelope=catalog.policy_envelope, transport_for=transport_for)
    return _router


def reset_router() -> None:
    """Forget the router (tests that switch catalogs)."""
    global _router
    with _router_lock:
        _router = None


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on this thread's long-lived event loop."""
    loop = getattr(_loop_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _loop_local.loop = loop
    return loop.run_until_complete(coro)
