"""Lambda SnapStart runtime hooks (docs/performance.md).

With SnapStart, Lambda runs a function's init once when a version is published, snapshots the memory
and starts later containers from that snapshot. :func:`before_snapshot` does the work every first
request would otherwise pay, without any network: it imports the core, loads the catalog and builds the
router, and runs one tiny compaction in each built-in mode on the offline offers (preset admission,
flow admission and scheduling, pydantic schemas, the policy tables all warm up on the way).
:func:`after_restore` undoes what must not be shared between restored containers: the random seed and
any pooled connection or AWS client created before the snapshot.

:func:`register` hooks both into ``snapshot_restore_py`` (shipped in Lambda's managed Python runtimes);
outside Lambda, where that module is missing, it does nothing.
"""

from __future__ import annotations

import codecs
import os
import random
import sys
from typing import Any

_WARM_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in pkg/io.py."},
    *[m for i in range(3) for m in (
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "bash", "arguments": f'{{"command": "cat pkg/io.py # {i}"}}'}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": "def read():\n    return 1\n" * 40},
    )],
    {"role": "assistant", "content": "The fix is ready."},
]


def before_snapshot() -> None:
    """Warm everything a first request touches, offline."""
    from compactor import service
    from compactor.catalog import bundled_catalog_path, get_catalog, load_catalog
    from compactor.container import get_router, run_sync
    from compactor.models import CompactRequest
    from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
    from compactor.providers.registry import transport_for
    from compactor.router import Router
    from compactor_aws import idempotency, ledger, s3_store

    get_router()  # the configured catalog: parsed and validated, no provider is called
    # Its offers' transports, imported: httpx and the HTTP transports for HTTP offers (35-51 ms of CPU a restored
    # container's first provider call paid), the Bedrock adapter for Bedrock's. No client is built and no
    # connection opened: a restored container builds its pooled client at its first call. (The CA directory
    # check a new client's TLS context makes is the one the S3 client below makes: certifi's bundle either way.)
    for offer in get_catalog().offers:
        transport_for(offer)
    offline = load_catalog(str(bundled_catalog_path()))
    router = Router(offline.offers, envelope=offline.policy_envelope, transport_for=transport_for)
    for extra in ({"decision_policy_ir": DEFAULT_DECISIONS_POLICY}, {}):
        request = CompactRequest.model_validate({"messages": _WARM_MESSAGES, "keep_recent": 1, **extra})
        run_sync(service.compact(request, deadline=service.request_deadline(), router=router))
    if "compactor.large_jobs" in sys.modules:  # a windowed job's worker: its Map item compacts a window task
        _warm_windows(router, CompactRequest.model_validate({"messages": _WARM_MESSAGES, "keep_recent": 1}))
    # botocore loads and caches the service models on a session's first clients; the clients themselves
    # are dropped after the restore and rebuilt from the cached models in a few ms.
    s3_store.s3_client()
    if os.environ.get(ledger.TABLE_ENV) or os.environ.get(idempotency.TABLE_ENV):
        ledger.dynamodb_client()  # the usage ledger and the idempotency records
    # A client's first connection checks its host name with the IDNA codec (urllib3 encodes it), whose
    # import (with stringprep and unicodedata) every restored container would pay on its first request.
    codecs.lookup("idna")


def _warm_windows(router: Any, request: Any) -> None:
    """One tiny windowed compaction on the offline offers, each window through ``compact_window`` as a Map item
    runs it: the windows module and the window flow's first run are in the snapshot, not in a restored item's."""
    from compactor import service
    from compactor.compaction.windows import Settings, compact_window, compact_windowed
    from compactor.container import run_sync

    async def run(task: dict[str, Any]) -> dict[str, Any]:
        return await compact_window(task, router=router, deadline=service.request_deadline())

    run_sync(compact_windowed(lambda: iter(_WARM_MESSAGES), Settings.from_request(request), run_window=run))


def after_restore() -> None:
    """Fresh randomness and fresh connections in every restored container."""
    from compactor_aws import ledger, s3_store

    random.seed(os.urandom(32))
    # The pooled HTTP clients, if the provider transports were ever imported: importing them here would
    # load httpx on every restore of a function whose calls never use it (the worker on built-in offers).
    http = sys.modules.get("compactor.providers.http")
    if http is not None:
        http.drop_clients()
    s3_store.reset_client()
    ledger.reset_client()
    # Provider keys read before the snapshot: a restore may come long after, and a rotated key is read again.
    secrets = sys.modules.get("compactor_aws.secrets")
    if secrets is not None:
        secrets.forget_keys()


def register() -> bool:
    """Register the hooks with the Lambda runtime; ``False`` where SnapStart hooks do not exist."""
    try:
        from snapshot_restore_py import register_after_restore, register_before_snapshot
    except ImportError:
        return False
    register_before_snapshot(before_snapshot)
    register_after_restore(after_restore)
    return True
