"""AWS requests that wait on a thread while the invocation goes on (docs/performance.md#where-the-time-goes).

The S3 path has requests that depend on nothing the other ones do: reading the object while the
idempotency record is written, writing the ledger entry while the record is completed. Each waits on
one of these threads, so the invocation pays one round trip for two. Only requests on clients that
already exist go here: a botocore client is thread-safe, its session (building a client) is not.

:func:`in_thread` is for the blocking SDK calls a request's concurrent tasks await (each batch's Bedrock
call, each fan-out component's result read): ``asyncio.to_thread`` runs them on the event loop's default
executor, ``min(32, cpu_count + 4)`` threads, 6 on a two-vCPU Lambda, so the seventh batch's call waited
for a thread until another's answer came (32 concurrent Converse calls of 0.5 s took 3.0 s instead of 0.5).
Its threads are as many as a client keeps connections (:data:`CALLS_IN_FLIGHT`, 64, as the httpx transports'
pool), made as calls need them; a call the router gave up on keeps its thread until the next piece of its answer
past its time or its read timeout (``compactor_aws.bedrock``, docs/providers.md "Abandoned calls").
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from compactor.container import PerContainer

T = TypeVar("T")

THREADS: PerContainer[ThreadPoolExecutor] = PerContainer(
    lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="compactor-aws"))
# Blocking calls in flight at once per container: the threads of :func:`in_thread`, and the connections a
# client that serves them keeps (``max_pool_connections``), so that no call waits for either.
CALLS_IN_FLIGHT = 64
CALL_THREADS: PerContainer[ThreadPoolExecutor] = PerContainer(
    lambda: ThreadPoolExecutor(max_workers=CALLS_IN_FLIGHT, thread_name_prefix="compactor-call"))


def start(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``function(*args, **kwargs)`` on a thread of the container; its ``Future``."""
    return THREADS.get().submit(function, *args, **kwargs)


async def in_thread(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``asyncio.to_thread(function, *args, **kwargs)`` on the container's call threads (the caller's context
    variables with it, as ``to_thread`` carries them: the request's call watcher of
    ``compactor_aws.observability`` and call budget of ``compactor.router``, for two)."""
    import asyncio  # loaded already: this runs on an event loop

    context = contextvars.copy_context()
    call = functools.partial(context.run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(CALL_THREADS.get(), call)
