"""A windowed job's Map item loads what it runs and nothing for the job's other steps
(docs/performance.md#the-three-rows-above-the-goal-twenty-second-round-issue-11).

A Distributed Map starts a cold ``WindowJobFunction`` for each window of a job's first wave; its item reads its task,
compacts it and writes its result (``compactor.large_jobs.run_window``, under ``compactor.service.request_deadline``).
It validates no request body (so neither the request models nor pydantic) and streams no transcript (so neither the
streamed reader with ijson nor the side-by-side requests of ``plan`` and ``assemble``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOT_FOR_AN_ITEM = ("compactor.models", "pydantic", "compactor.transcript_stream", "ijson", "compactor.transcripts",
                   "compactor.side_by_side")

# The handler's init, then one Map item run through it (run_batch: the task read, compact_window, the result written)
# on an in-memory store with the bundled offline offers: what a cold item imports, the window's compaction included.
_ITEM_PROBE = """
import contextlib, io, json, sys
sys.path.insert(0, {functions!r})
import window_jobs
at_init = [name for name in {names!r} if name in sys.modules]

class Store:
    def __init__(self, objects):
        self.objects = objects

    @contextlib.contextmanager
    def open(self, bucket, key, *, version_id=None):
        yield io.BytesIO(self.objects[key])

    def put(self, bucket, key, data, *, content_type, metadata):
        self.objects[key] = data

class Context:
    function_name, memory_limit_in_mb, aws_request_id = "WindowJobFunction", 1024, "r-1"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:WindowJobFunction"

    def get_remaining_time_in_millis(self):
        return 600_000

window_jobs.store = Store({{"work/j/p1/w0.json": sys.stdin.buffer.read()}})
item = {{"task_key": "work/j/p1/w0.json", "result_key": "work/j/p1/w0.result.json"}}
window_jobs.handler({{"Items": [item], "BatchInput": {{"bucket": "b"}}}}, Context())
result = json.loads(window_jobs.store.objects["work/j/p1/w0.result.json"])
print(json.dumps({{"at_init": at_init, "after_item": [name for name in {names!r} if name in sys.modules],
                  "summarized": result["ok"]}}))
"""


def _task() -> bytes:
    """The first window task of a transcript worth compacting, as a job's plan writes it."""
    from compactor.catalog import bundled_catalog_path  # noqa: F401 (the offline offers the child reads)
    from compactor.compaction.windows import RunState, Settings, windows
    from compactor.models import CompactRequest

    messages = [{"role": "user", "content": "Fix the failing test."}] + [m for i in range(40) for m in (
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"line {i}\n" * 300})] + [
        {"role": "assistant", "content": "Done."}]
    state = RunState.begin(Settings.from_request(CompactRequest.model_validate({"messages": messages,
                                                                                "keep_recent": 2})))
    context = state.scan(iter(messages), reread=lambda: iter(messages))
    return json.dumps(next(iter(windows(iter(messages), context, state.pass_settings())))).encode()


def test_a_window_items_modules_leave_out_the_other_steps_and_the_request_models() -> None:
    # What window_jobs.py imports at init, and what its Map item imports as it runs a window (it imported only the
    # modules before: a module the window's compaction imports as it runs went unseen).
    from compactor.catalog import bundled_catalog_path

    probe = _ITEM_PROBE.format(functions=str(REPO / "functions" / "window_jobs"), names=NOT_FOR_AN_ITEM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COMPACTOR_CATALOG": str(bundled_catalog_path()),
           "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", probe], input=_task(), capture_output=True, check=True, env=env)
    seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert seen == {"at_init": [], "after_item": [], "summarized": True}
