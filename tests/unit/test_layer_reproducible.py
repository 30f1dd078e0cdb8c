"""The layer's packages build to the same bytes wherever they are built (docs/deploy.md#what-a-deploy-publishes):
``sam package`` names the layer's zip by its checksum and every function's version hash covers the layer, so a
build of unchanged sources in another directory (another clone, another CI runner) that differed in any byte
would publish a new layer and a new version of every function, each with its own SnapStart snapshot. The
bytecode names the sources where Lambda mounts them (``/opt/python``), not the build directory."""

from __future__ import annotations

import marshal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "compactor"


def build(root: Path) -> Path:
    root.mkdir(parents=True)
    subprocess.run(["make", "-s", "-C", str(LAYER), "code", f"ARTIFACTS_DIR={root}", f"PYTHON={sys.executable}"],
                   check=True, capture_output=True)
    return root / "python"


def contents(tree: Path) -> dict[str, bytes]:
    return {str(path.relative_to(tree)): path.read_bytes() for path in sorted(tree.rglob("*")) if path.is_file()}


def test_a_build_in_another_directory_is_byte_identical(tmp_path: Path) -> None:
    first = contents(build(tmp_path / "a"))
    second = contents(build(tmp_path / "another" / "much" / "deeper" / "checkout"))
    assert sum(name.endswith(".pyc") for name in first) > 100
    assert first.keys() == second.keys()
    assert [name for name in first if first[name] != second[name]] == []


def test_the_bytecode_names_the_sources_where_lambda_mounts_the_layer(tmp_path: Path) -> None:
    tree = build(tmp_path / "layer")
    compiled = tree / "compactor" / "__pycache__" / f"service.{sys.implementation.cache_tag}.pyc"
    code = marshal.loads(compiled.read_bytes()[16:])  # after the .pyc header: magic, flags, source hash
    assert code.co_filename == "/opt/python/compactor/service.py"
    handler = tree / "compactor_aws" / "__pycache__" / f"snapstart.{sys.implementation.cache_tag}.pyc"
    assert marshal.loads(handler.read_bytes()[16:]).co_filename == "/opt/python/compactor_aws/snapstart.py"


def test_the_hashed_ca_directory_is_byte_identical(tmp_path: Path) -> None:
    """The layer's CA bundle as a hashed directory (``make ca-certificates``;
    docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11): the same names and bytes wherever
    it is built."""
    import shutil

    import certifi
    import pytest

    if shutil.which("openssl") is None and shutil.which("c_rehash") is None:
        pytest.skip("no openssl")
    trees = []
    for root in (tmp_path / "a", tmp_path / "another" / "much" / "deeper"):
        (root / "python" / "certifi").mkdir(parents=True)
        shutil.copy(certifi.where(), root / "python" / "certifi" / "cacert.pem")
        subprocess.run(["make", "-s", "-C", str(LAYER), "ca-certificates", f"ARTIFACTS_DIR={root}",
                        f"PYTHON={sys.executable}"], check=True, capture_output=True)
        trees.append(contents(root / "python" / "compactor" / "ca-certificates"))
    assert len(trees[0]) > 100 and b"../../certifi/cacert.pem" in trees[0]["manifest.json"]
    assert trees[0] == trees[1]


def test_the_operators_catalog_ships_where_catalog_path_names_it(tmp_path: Path) -> None:
    """docs/deploy.md "Real model providers": a ``catalog.json`` beside the layer's Makefile reaches
    ``/opt/python/catalog.json`` (what ``CatalogPath`` names); the build used to ship only the packages, so the
    documented catalog never reached the functions. An invalid catalog fails the build; without one, nothing ships."""
    import json

    catalog = REPO / "docs" / "catalogs" / "bedrock.json"
    tree = build(tmp_path / "layer")

    def make_catalog(source: Path) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["make", "-s", "-C", str(LAYER), "catalog", f"ARTIFACTS_DIR={tree.parent}",
                               f"PYTHON={sys.executable}", f"CATALOG={source}"], capture_output=True)

    assert make_catalog(tmp_path / "absent.json").returncode == 0
    assert not (tree / "catalog.json").exists()
    assert make_catalog(catalog).returncode == 0
    assert (tree / "catalog.json").read_bytes() == catalog.read_bytes()
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"offers": [{"id": "x", "provider": "bedrock"}]}))
    failed = make_catalog(broken)
    assert failed.returncode != 0 and b"catalog" in failed.stderr
    # build-CompactorLayer, what sam build runs, ships it.
    recipe = subprocess.run(["make", "-n", "-C", str(LAYER), "build-CompactorLayer", f"ARTIFACTS_DIR={tree.parent}",
                             f"PYTHON={sys.executable}", f"CATALOG={catalog}"], capture_output=True, text=True)
    assert f'cp "{catalog}" "{tree.parent}/python/catalog.json"' in recipe.stdout
