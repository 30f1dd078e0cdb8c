"""The offline offers' fallback patterns and the rendered tool-call pattern compile on first use, not at import
(docs/performance.md#the-workers-cold-start-sixth-round-issue-11): importing the offers compiles none of them, and
what they match is unchanged (the decider's visible-write, visible-create and visible-content fallbacks, the
summarizer's carried task line, name tokens and tool-call lines)."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json
import compactor.offline.transport
from compactor import markers
from compactor.offline import decider, summarizer
accessors = [markers.tool_call_pattern, decider._visible_write, decider._visible_create, decider._visible_content,
             summarizer._name_token, summarizer._task_line]
print(json.dumps([accessor.cache_info().currsize for accessor in accessors]))
"""


def test_importing_the_offline_offers_compiles_none_of_them() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [0] * 6


def test_what_they_match() -> None:
    from compactor import markers
    from compactor.offline import decider, summarizer

    line = "[tool call bash({\"command\": \"ls\"})]"
    assert markers.tool_call_pattern().findall(f"x\n{line}\ny") == [("bash", '{"command": "ls"}')]
    assert [m.group(0) for m in decider._visible_write().finditer("run cat > 'a.py' <<'EOF'\nx")] == [
        "cat > 'a.py' <<'EOF'"]
    assert decider._visible_create().findall('{"command": "create", "path": "/w/a.py"}') == ["/w/a.py"]
    assert decider._visible_content().findall('{"content": "a \\"b\\" c"}') == ['a \\"b\\" c']
    assert summarizer._task_line().search("seal\ntask: fix it\nmore").group(1) == "fix it"
    assert summarizer._name_token().findall("use ./pkg/io.py and ~x") == ["use", "./pkg/io.py", "and", "~x"]
