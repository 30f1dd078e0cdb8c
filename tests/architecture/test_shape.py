"""The shape of the code (docs/architecture.md): who may import what, thin handlers, docs citations,
and what the Lambda layer ships. Each check reads the source itself (imports parsed with ``ast``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor_cli.sam_template import load_template

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "compactor"
CORE = LAYER / "compactor"
HANDLER_MAX_LINES = 120
# Modules about compaction: the engine and the policy language must not depend on any of them.
COMPACTION_MODULES = ("compactor.compaction", "compactor.offline", "compactor.transcripts",
                      "compactor.transcript_stream", "compactor.object_jobs", "compactor.models",
                      "compactor.service", "compactor.call_record", "compactor.container")
AWS_MODULES = ("boto3", "botocore", "aws_lambda_powertools", "aws_xray_sdk", "compactor_aws")
EMULATORS = {"serve.py", "invoke.py", "lambda_runtime.py", "sam_template.py"}


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved against the package)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = ".".join(path.relative_to(LAYER).with_suffix("").parts[:-node.level])
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def offending(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return [f"{path.relative_to(REPO)} imports {name}" for path in paths for name in set(imports(path))
            if any(name == f or name.startswith(f + ".") for f in forbidden)]


@pytest.mark.parametrize("package", ["flow", "policy"])
def test_the_engine_and_the_policy_language_know_nothing_of_compaction(package: str) -> None:
    files = python_files(CORE / package)
    assert files and offending(files, COMPACTION_MODULES) == []
    # The words themselves stay out too, the package's own name included: the engine and the policy
    # language import their siblings relatively (``from ..cost import``), so they read as generic code.
    words = [f"{p.relative_to(REPO)}:{i}" for p in files
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"fragment|transcript|compact", line, re.IGNORECASE)]
    assert words == []


def test_the_policy_language_imports_only_itself_and_shared_basics() -> None:
    allowed = ("compactor.policy", "compactor.identity", "compactor.providers.base", "compactor.jsonutil",
               "compactor.records")
    outside = [entry for entry in offending(python_files(CORE / "policy"), ("compactor",))
               if not any(entry.split(" imports ")[1].startswith(name) for name in allowed)]
    assert outside == []


def test_the_offline_offers_take_shared_texts_from_the_core_not_from_compaction() -> None:
    """The built-in offers read what the compaction modes write (excerpt markers, fragment ids, the seal
    head, tool call lines) through ``compactor.markers``; they import no compaction module and copy none
    of those strings."""
    files = python_files(CORE / "offline")
    assert files and offending(files, ("compactor.compaction",)) == []
    from compactor import markers

    texts = [markers.EVIDENCE_MARKER, markers.RECENT_MARKER, markers.SEAL_HEAD, "fragment_", "[tool call "]
    copied = [f"{p.relative_to(REPO)} copies {text!r}" for p in files for literal in string_literals(p)
              for text in texts if text in literal]
    assert copied == []


def string_literals(path: Path) -> list[str]:
    """The string constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_core_has_no_aws_imports() -> None:
    assert offending(python_files(CORE), AWS_MODULES) == []


def test_nothing_in_the_layer_imports_the_cli() -> None:
    assert offending(python_files(LAYER), ("compactor_cli",)) == []
    assert offending(python_files(REPO / "functions"), ("compactor_cli",)) == []


@pytest.mark.parametrize("handler", sorted((REPO / "functions").glob("*/*.py")), ids=lambda p: p.name)
def test_handlers_stay_thin(handler: Path) -> None:
    assert len(handler.read_text(encoding="utf-8").splitlines()) <= HANDLER_MAX_LINES


def test_sources_cite_the_projects_own_docs() -> None:
    citing = [f"{p.relative_to(REPO)}:{i}" for root in ("layers", "functions", "cli")
              for p in python_files(REPO / root)
              for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
              if re.search(r"\b(REFERENCE|CONTRACT)\b|§", line)]
    assert citing == []
    cited = {m.group(1) for root in ("layers", "functions", "cli") for p in python_files(REPO / root)
             for m in re.finditer(r"docs/([a-z_-]+\.md)", p.read_text(encoding="utf-8"))}
    assert {"architecture.md", "behaviour.md"} <= cited
    missing = sorted(name for name in cited if not (REPO / "docs" / name).is_file() and name != "scale.md")
    assert missing == []  # scale.md is being written alongside (issue 14)


TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt", ".cfg", ".ini", ".sh", ".html", ".js",
                 ".css", ".jsonl", ".asl"}


def tracked_text_files() -> list[Path]:
    """The repository's source, test and documentation files (what git tracks; fixtures are data)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode == 0:
        names = [n for n in listed.stdout.decode("utf-8").split("\0") if n]
    else:  # not a git checkout: the same files by walking, minus what git would not hold
        skip = {".git", ".aws-sam", "node_modules", "__pycache__"}
        names = [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file()
                 and not skip & set(p.relative_to(REPO).parts) and not p.relative_to(REPO).parts[0].startswith(".venv")]
    return sorted(REPO / n for n in names
                  if not n.startswith("tests/fixtures/")
                  and (Path(n).suffix in TEXT_SUFFIXES or Path(n).name == "Makefile")
                  and (REPO / n).is_file())


def test_nothing_outside_the_fixtures_cites_documents_outside_the_repository() -> None:
    files = tracked_text_files()
    assert any(p.name == "test_corpus.py" for p in files) and any(p.name == "behaviour.md" for p in files)
    here = Path(__file__).resolve()
    citing = [f"{p.relative_to(REPO)}:{i}" for p in files if p.resolve() != here
              for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
              if re.search(r"\b(REFERENCE|CONTRACT)\b|§", line)]
    assert citing == []


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#+ +(.+)$", doc.read_text(encoding="utf-8"), re.MULTILINE)}


def test_every_cited_docs_section_exists() -> None:
    docs = REPO / "docs"
    cited: set[tuple[str, str]] = set()
    for p in tracked_text_files():
        text = p.read_text(encoding="utf-8", errors="replace")
        cited |= {(m.group(1), m.group(2)) for m in re.finditer(r"docs/([\w-]+\.md)#([\w-]+)", text)}
        if p.parent == docs:  # links between the docs themselves
            cited |= {(m.group(1) or p.name, m.group(2))
                      for m in re.finditer(r"\]\(([\w-]+\.md)?#([\w-]+)\)", text)}
    assert ("behaviour.md", "worked-example-fixture-t") in cited
    missing = sorted(f"docs/{name}#{anchor}" for name, anchor in cited
                     if not (docs / name).is_file() or anchor not in anchors(docs / name))
    assert missing == []


def layer_content() -> list[Path]:
    """What ``sam build`` copies for CompactorLayer: its ContentUri tree (BuildMethod python3.12 also
    installs requirements.txt, which must not name this project)."""
    layer = load_template(REPO / "template.yaml")["Resources"]["CompactorLayer"]
    root = REPO / layer["Properties"]["ContentUri"]
    assert root.resolve() == LAYER.resolve()
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_the_layer_ships_no_cli_and_no_emulator() -> None:
    files = layer_content()
    names = {p.relative_to(LAYER).parts[0] for p in files}
    assert {"compactor", "compactor_aws", "requirements.txt"} <= names and "compactor_cli" not in names
    assert not [p for p in files if p.name in EMULATORS or p.name == "__main__.py"]
    requirements = (LAYER / "requirements.txt").read_text(encoding="utf-8")
    assert not re.search(r"^\s*(compactor|-e|\.)", requirements, re.MULTILINE)
    shipped_code = "\n".join(p.read_text(encoding="utf-8") for p in files if p.suffix == ".py")
    assert "compactor_cli" not in shipped_code and "ThreadingHTTPServer" not in shipped_code
    built = REPO / ".aws-sam" / "build" / "CompactorLayer" / "python"
    if built.is_dir():  # after `make build`: the real build output too
        assert not (built / "compactor_cli").exists()
        assert not [p for p in built.rglob("*.py") if p.name in EMULATORS and "compactor" in p.parts[-2]]


def test_the_call_record_and_the_engine_agree_on_model_node_kinds() -> None:
    from compactor.call_record import MODEL_NODE_KINDS
    from compactor.flow.graph import MODEL_KINDS

    assert MODEL_NODE_KINDS == MODEL_KINDS


def test_reporting_on_a_call_does_not_load_the_engine() -> None:
    import subprocess
    import sys

    probe = "import sys, compactor.call_record, compactor_aws.observability; print('compactor.flow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_transport_names_have_one_home_and_the_docs_list_them() -> None:
    """``compactor.providers.registry.TRANSPORTS`` is the only list of transport names: the catalog's
    schema comes from it, and docs/providers.md's table names the same transports and protocols."""
    from compactor.catalog import OfferSpec
    from compactor.providers.registry import TRANSPORTS

    schema = OfferSpec.model_json_schema()["properties"]["transport"]
    assert tuple(schema["enum"]) == tuple(TRANSPORTS)
    table = (REPO / "docs" / "providers.md").read_text(encoding="utf-8")
    documented = {m.group(1): frozenset(re.findall(r"`(\w+)`", m.group(2)))
                  for m in re.finditer(r"^\| `([\w-]+)` \| ((?:`\w+`(?:, )?)+) \|", table, re.MULTILINE)}
    assert documented == {name: kind.protocols for name, kind in TRANSPORTS.items()}
    sources = [p for root in ("layers", "cli") for p in python_files(REPO / root)]
    listing = [f"{p.relative_to(REPO)}" for p in sources if p.name != "registry.py"
               and sum(f'"{name}"' in p.read_text(encoding="utf-8") for name in TRANSPORTS) >= 4]
    assert listing == []


def test_the_evaluation_metric_shares_no_heuristics_with_the_compactor() -> None:
    """docs/evaluation.md: evidence is computed from input and output only, by the harness's own rules;
    importing the compactor's salience or offline heuristics would let the metric move with them."""
    source = (REPO / "cli" / "compactor_cli" / "evaluation.py").read_text(encoding="utf-8")
    imported = set(re.findall(r"^\s*(?:from|import) (compactor[\w.]*)", source, re.MULTILINE))
    assert not {name for name in imported if name.startswith(("compactor.compaction.salience", "compactor.offline",
                                                               "compactor.markers"))}
    assert "is_code_identifier" not in source
