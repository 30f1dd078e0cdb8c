"""Only the response edge touches a body's ``x_router`` and ``compaction`` blocks (docs/architecture.md,
"The call record"): everything else reads the typed ``CallRecord``. Each check parses the source with
``ast`` and looks for the keys as string constants: subscripts (``body["x_router"]``, read or
written), ``.get``/``.pop``/``.setdefault`` calls, ``in`` tests and dict literals."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("layers", "cli", "functions")
BLOCKS = frozenset({"x_router", "compaction"})
EDGE = frozenset({
    "layers/compactor/compactor/flows_service.py",  # the /v1/flows body (its block: flow/result.py)
    "layers/compactor/compactor/compaction/seal.py",  # each mode's report() builds its body
    "layers/compactor/compactor/compaction/decision.py",
    "layers/compactor/compactor/compaction/mask.py",
    "layers/compactor/compactor/compaction/windowed.py",  # the body of a windowed run
})
"""The modules that put the blocks into response bodies (what goes in them is built by
``compactor.response_blocks`` and ``compactor.flow.result``): the only ones that may name them."""
KEY_METHODS = frozenset({"get", "pop", "setdefault"})


def _block(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in BLOCKS else None


def block_uses(source: str, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """``(line, what)`` for every place ``source`` reads or writes an ``x_router``/``compaction`` key."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Subscript) and _block(node.slice):
            yield node.lineno, f'[{node.slice.value!r}]'  # type: ignore[attr-defined]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KEY_METHODS
              and node.args and _block(node.args[0])):
            yield node.lineno, f".{node.func.attr}({node.args[0].value!r})"  # type: ignore[attr-defined]
        elif isinstance(node, ast.Compare) and _block(node.left) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            yield node.lineno, f"{node.left.value!r} in …"  # type: ignore[attr-defined]
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if _block(key):
                    yield key.lineno, f"{{{key.value!r}: …}}"  # type: ignore[union-attr]


def scanned_files() -> list[Path]:
    return sorted(p for top in SCANNED for p in (REPO / top).rglob("*.py")
                  if "__pycache__" not in p.parts and ".aws-sam" not in p.parts)


def test_only_the_response_edge_touches_the_x_router_and_compaction_blocks() -> None:
    files = scanned_files()
    assert any(path.name == "report.py" for path in files)  # the scan sees the CLI
    found = [f"{path.relative_to(REPO)}:{line} {what}" for path in files
             if path.relative_to(REPO).as_posix() not in EDGE
             for line, what in block_uses(path.read_text(encoding="utf-8"), str(path))]
    assert found == []


def test_every_edge_module_still_builds_a_block() -> None:
    # An edge module that no longer names a block leaves the list (it would hide a future read).
    assert [name for name in sorted(EDGE) if not list(block_uses((REPO / name).read_text(encoding="utf-8")))] == []


def test_every_kind_of_use_is_found() -> None:
    source = """
x = body["x_router"]
body["compaction"] = {}
y = body.get("x_router") or body.pop("compaction", None)
z = "compaction" in body
w = {"x_router": 1}
fine = body["messages"], body.get("usage"), {"compacted": True}, "x_router"
"""
    assert sorted(line for line, _ in block_uses(source)) == [2, 3, 4, 4, 5, 6]
