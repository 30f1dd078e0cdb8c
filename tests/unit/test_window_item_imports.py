"""A windowed job's Map item loads what it runs and nothing for the job's other steps
(docs/performance.md#the-three-rows-above-the-goal-twenty-second-round-issue-11).

A Distributed Map starts a cold ``WindowJobFunction`` for each window of a job's first wave; its item reads its task,
compacts it and writes its result (``compactor.large_jobs.run_window``, under ``compactor.service.request_deadline``).
It validates no request body (so neither the request models nor pydantic) and streams no transcript (so neither the
streamed reader with ijson nor the side-by-side requests of ``plan`` and ``assemble``).
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_AN_ITEM = ("compactor.models", "pydantic", "compactor.transcript_stream", "ijson", "compactor.transcripts",
                   "compactor.side_by_side")


def test_a_window_items_modules_leave_out_the_other_steps_and_the_request_models() -> None:
    # What window_jobs.py imports at init and what its Map item imports (run_batch, run_window).
    probe = ("import json, sys; "
             "from compactor import container, large_jobs, object_jobs, service; "
             "from compactor.compaction.windows import compact_window; "
             "from compactor_aws import windowed_jobs; "
             "from compactor_aws.s3_store import S3Store; "
             f"print(json.dumps([name for name in {NOT_FOR_AN_ITEM!r} if name in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []

