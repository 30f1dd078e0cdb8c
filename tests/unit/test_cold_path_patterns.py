"""The modules every decision-mode first request imports (the S3 function's, the API's and the worker's) make
their module-level regular expressions with ``compactor.patterns``, so the built layer stores their programs and
a cold start parses none of them (docs/performance.md#stored-patterns-of-the-decision-mode-issue-11-seventh-round)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_PROBE = textwrap.dedent("""\
    import json, sys
    from re import _compiler
    import compactor.patterns
    parsed = []
    compile_pattern = _compiler.compile
    def watch(source, flags=0):
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "re":
            frame = frame.f_back
        name = frame.f_globals.get("__name__", "") if frame is not None else ""
        if name.split(".")[0] in ("compactor", "compactor_aws") and name != "compactor.patterns":
            parsed.append([name, source])
        return compile_pattern(source, flags)
    _compiler.compile = watch
    import compactor.compaction.decision, compactor.offline.transport, compactor.catalog, compactor.router
    print(json.dumps(parsed))
""")


def test_the_decision_mode_s_modules_compile_their_patterns_through_compactor_patterns() -> None:
    done = subprocess.run([sys.executable, "-B", "-c", _PROBE], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []
