"""AWS requests that wait on a thread while the invocation goes on (docs/performance.md#where-the-time-goes).

The S3 path has requests that depend on nothing the other ones do: reading the object while the
idempotency record is written, writing the ledger entry while the record is completed. Each waits on
one of these threads, so the invocation pays one round trip for two. Only requests on clients that
already exist go here: a botocore client is thread-safe, its session (building a client) is not.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from compactor.container import PerContainer

T = TypeVar("T")

THREADS: PerContainer[ThreadPoolExecutor] = PerContainer(
    lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="compactor-aws"))


def start(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``function(*args, **kwargs)`` on a thread of the container; its ``Future``."""
    return THREADS.get().submit(function, *args, **kwargs)
