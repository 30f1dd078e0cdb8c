"""Lambda SnapStart runtime hooks (docs/performance.md).

With SnapStart, Lambda runs a function's init once when a version is published, snapshots the memory
and starts later containers from that snapshot. :func:`before_snapshot` does the work every first
request would otherwise pay, without any network: it imports the core, loads the catalog and builds the
router, and runs compactions on the offline offers (preset admission, flow admission and scheduling,
pydantic schemas, the policy tables all warm up on the way): a tiny one in each built-in mode and one shaped
like a real request (:func:`real_shaped_messages`: several batches of tool calls, a kept tail, synthetic text
built here). It imports the modules a function's first request imports besides the compaction
(:data:`FIRST_REQUEST_IMPORTS`) and builds the AWS clients it uses, whose service models botocore keeps.
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

# What a function's first request imports besides its compaction, by a module only that function's handler loads at
# init (docs/performance.md, "What a restored first request still did cold, twenty-fifth round"): the API's POST
# /v1/compact bills the call and looks for the fan-out runner; the S3 function bills the object's job and reads its
# transcript. (Importing them at init would lengthen every cold start without SnapStart.)
FIRST_REQUEST_IMPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("compactor_aws.routes.compact", ("compactor_aws.billing", "compactor_aws.stepfunctions_runner")),
    ("compactor_aws.s3_events", ("compactor_aws.billing", "compactor.transcripts")),
)


def real_shaped_messages(rounds: int = 24) -> list[dict[str, Any]]:
    """A synthetic agent run shaped like the corpus's (openai-chat with tool calls): a task, ``rounds`` tool calls
    with JSON arguments and outputs of 0.5-3 KB (listings, searches, a failing test run with its traceback), then
    an answer and a last user turn. With 24 rounds a decision request of it makes two batches (51 KB), so the
    multi-batch paths (batching, several decisions and summaries, their reassembly) run before the snapshot. Built
    here, not read from a corpus file: nothing of any caller."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer shell."},
        {"role": "user", "content": "<task>\nThe parser in pkg/io.py drops the last record of a file.\n"
                                    "Fix it and keep the tests passing.\n</task>"},
    ]
    for i in range(rounds):
        path, kind = f"pkg/module_{i % 7}.py", i % 4
        if kind == 0:
            command = f"cat -n {path}"
            output = "".join(f"{n:6d}\tdef helper_{i}_{n}(value):\n{n + 1:6d}\t    return value + {n}\n"
                             for n in range(1, 60, 2))
        elif kind == 1:
            command = f'grep -rn "helper_{i}" pkg tests | head -40'
            output = "".join(f'{path}:{n}:    result = helper_{i}_{n}(record)  # "quoted" \\ path\n'
                             for n in range(1, 40))
        elif kind == 2:
            command = f"python -m pytest tests/test_module_{i % 7}.py -x -q"
            output = (f"F{'.' * 30}\n{'=' * 35} FAILURES {'=' * 35}\n{'_' * 27} test_reads_last_{i} {'_' * 27}\n"
                      "Traceback (most recent call last):\n"
                      f"  File \"/testbed/{path}\", line {40 + i}, in read_records\n"
                      "    return records[:-1]\nAssertionError: expected 3 records, got 2\n"
                      "1 failed, 30 passed in 0.42s\n")
        else:
            command = f"sed -n '{i},{i + 30}p' {path}"
            output = "\n".join(f"    if record.kind == 'k{n}':\n        yield record.value * {n}" for n in range(30))
        arguments = '{"command": "' + command.replace('"', '\\"') + '"}'
        messages.append({"role": "assistant", "content": f"Let me look at {path} (step {i}).", "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": arguments}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}",
                         "content": f"<returncode>{int(kind == 2)}</returncode>\n<output>\n{output}\n</output>"})
    messages.append({"role": "assistant", "content": "The fix is in pkg/io.py: the loop now yields the last record."})
    messages.append({"role": "user", "content": "Thanks. Submit it."})
    return messages


def before_snapshot() -> None:
    """Warm everything a first request touches, offline."""
    import importlib

    from compactor import service
    from compactor.catalog import bundled_catalog_path, get_catalog, load_catalog
    from compactor.container import get_router, run_sync
    from compactor.jsonutil import bounded_loads, dense_dumps
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
    # A request of a real one's shape, as a body is read (the bounded JSON reading, the mode named): the paths of
    # several batches, tool-call units and a kept tail, which the tiny compactions never reach (the host's default
    # decision policy: a caller's own is the caller's).
    real = CompactRequest.model_validate(bounded_loads(dense_dumps(
        {"messages": real_shaped_messages(), "mode": "decision", "keep_recent": 2, "target_ratio": 0.3})))
    run_sync(service.compact(real, deadline=service.request_deadline(), router=router))
    if "compactor.large_jobs" in sys.modules:  # a windowed job's worker: its Map item compacts a window task
        _warm_windows(router, real)
    for loaded, modules in FIRST_REQUEST_IMPORTS:
        if loaded in sys.modules:
            for module in modules:
                importlib.import_module(module)
    # botocore loads and caches the service models on a session's first clients; the clients themselves
    # are dropped after the restore and rebuilt from the cached models in a few ms.
    s3_store.s3_client()
    if os.environ.get(ledger.TABLE_ENV) or os.environ.get(idempotency.TABLE_ENV):
        ledger.dynamodb_client()  # the usage ledger and the idempotency records
    # A client's first connection checks its host name with the IDNA codec (urllib3 encodes it), whose
    # import (with stringprep and unicodedata) every restored container would pay on its first request;
    # the S3 function reads an object's text as UTF-8 with an optional byte order mark.
    for codec in ("idna", "utf_8_sig"):
        codecs.lookup(codec)


def _warm_windows(router: Any, request: Any) -> None:
    """A windowed compaction of ``request``'s messages on the offline offers, each window through ``compact_window``
    as a Map item runs it: the windows module and the window flow's first run are in the snapshot, not in a
    restored item's."""
    from compactor import service
    from compactor.compaction.windows import Settings, compact_window, compact_windowed
    from compactor.container import run_sync

    async def run(task: dict[str, Any]) -> dict[str, Any]:
        return await compact_window(task, router=router, deadline=service.request_deadline())

    run_sync(compact_windowed(lambda: iter(request.messages), Settings.from_request(request), run_window=run))


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
