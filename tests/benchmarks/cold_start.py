"""Cold-start cost of the API handler: importing ``functions/compact/compact.py`` in fresh processes,
as a ratio to importing its third-party dependencies alone (goal: at most 1.3).

"Its third-party dependencies" are exactly the non-standard-library modules that importing the handler
loads (Powertools, the X-Ray SDK its Tracer pulls in, pydantic and their own dependencies), found by
importing the handler once and reading ``sys.modules``. The baseline imports those same modules and
nothing else; the difference is the handler's own cost: the ``compactor`` modules it loads at import
time, building the request models, and setting up Logger, Tracer, Metrics and the resolver. Each sample
is a new interpreter timing only the import statements, so interpreter start-up is left out.

Run: ``.venv/bin/python tests/benchmarks/cold_start.py [--runs N]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATHS = [str(REPO / "functions" / "compact"), str(REPO / "layers" / "compactor")]
HANDLER_MODULE = "compact"
OWN_PACKAGES = {HANDLER_MODULE, "compactor", "compactor_aws"}
GOAL = 1.3

_PRELUDE = f"import sys, time\nsys.path[:0] = {PATHS!r}\n"
_LIST_DEPENDENCIES = _PRELUDE + f"""\
import json
before = set(sys.modules)
import {HANDLER_MODULE}
own = {sorted(OWN_PACKAGES)!r}
roots = {{name: name.split(".")[0] for name in sys.modules if name not in before}}
print(json.dumps([name for name, root in roots.items() if root not in sys.stdlib_module_names
                  and root not in own and not root.startswith("_sysconfigdata")]))
"""
_TIME_IMPORTS = _PRELUDE + """\
names = {names!r}
started = time.perf_counter()
{statement}
print(time.perf_counter() - started)
"""
_IMPORT_ALL = """\
for name in names:
    try:
        __import__(name)
    except ImportError:  # aliases some packages register in sys.modules without an importable file
        pass"""


def _python(script: str) -> str:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout


def third_party_modules() -> list[str]:
    """Third-party modules that importing the handler loads, in load order."""
    return json.loads(_python(_LIST_DEPENDENCIES))


def time_import(statement: str, names: list[str]) -> float:
    """Seconds a fresh interpreter spends executing ``statement``."""
    return float(_python(_TIME_IMPORTS.format(names=names, statement=statement)).split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per side (default 15)")
    args = parser.parse_args()

    names = third_party_modules()
    handler_samples, dependency_samples = [], []
    for _ in range(args.runs):  # interleaved so both sides see the same machine conditions
        dependency_samples.append(time_import(_IMPORT_ALL, names))
        handler_samples.append(time_import(f"import {HANDLER_MODULE}", []))
    handler_ms = statistics.median(handler_samples) * 1000
    dependency_ms = statistics.median(dependency_samples) * 1000
    ratio = handler_ms / dependency_ms

    packages = sorted({name.split(".")[0] for name in names})
    print(f"third-party modules loaded by the handler: {len(names)} from {', '.join(packages)}")
    print(f"runs per side:                    {args.runs}")
    print(f"third-party dependencies alone:   {dependency_ms:7.1f} ms (median)")
    print(f"handler module ({HANDLER_MODULE}.py):      {handler_ms:7.1f} ms (median)")
    print(f"ratio:                            {ratio:7.2f} (goal <= {GOAL})")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
