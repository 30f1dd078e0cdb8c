"""The built layer's stored ``__init__`` code of its records (``compactor.record_cache``, ``records.cache``;
docs/performance.md#the-workers-cold-start-seventh-round-issue-11): the layer's recipe writes it, a cold
start compiles no record's ``__init__`` with it, and every record gets exactly the ``__init__`` compiling its
source gives."""

from __future__ import annotations

import json
import marshal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compactor import record_cache, records

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "compactor"

# In a fresh process over a built layer: import every module of its packages with ``records.cache`` (or
# none), count the ``__init__`` sources compiled, then rebuild each record's ``__init__`` from its source
# without the file and compare it with the one the class got.
_IMPORT_ALL = textwrap.dedent("""\
    import dataclasses, importlib, json, pkgutil, sys
    sys.path.insert(0, {layer!r})
    from compactor import records
    records.CACHE_FILE = {cache!r}
    compiled = []
    compile_source = records.compile_source
    records.compile_source = lambda source: compiled.append(source) or compile_source(source)
    for package in ("compactor", "compactor_aws"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            importlib.import_module(info.name)
    checked, differing = 0, []
    records.compile_source, records._cache = compile_source, {{}}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("compactor", "compactor_aws"):
            continue
        for cls in list(vars(module).values()):
            if not (isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls)
                    and cls.__repr__.__code__.co_filename == records.__file__):  # built by record
                continue
            params = cls.__dataclass_params__
            fresh = records._init(cls, dataclasses.fields(cls), params.frozen, "__slots__" in cls.__dict__)
            got = cls.__init__
            checked += 1
            if (got.__code__ != fresh.__code__ or got.__defaults__ != fresh.__defaults__
                    or [c.cell_contents for c in got.__closure__ or ()] != [c.cell_contents for c in fresh.__closure__ or ()]):
                differing.append(cls.__qualname__)
    print(json.dumps({{"compiled": len(compiled), "checked": checked, "differing": differing}}))
""")


@pytest.fixture(scope="module")
def built_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer's packages as its recipe builds them (``make code``): bytecode and ``records.cache``."""
    root = tmp_path_factory.mktemp("layer")
    subprocess.run(["make", "-s", "-C", str(LAYER), "code", f"ARTIFACTS_DIR={root}", f"PYTHON={sys.executable}"],
                   check=True, capture_output=True)
    return root / "python"


def import_all(layer: Path, cache: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-B", "-c", _IMPORT_ALL.format(layer=str(layer), cache=str(cache))],
                          capture_output=True, text=True, check=True, cwd=layer)
    return json.loads(done.stdout.splitlines()[-1])


def test_the_recipe_stores_the_code_of_every_record_s_init(built_layer: Path) -> None:
    cache = records.load_cache(str(built_layer / "compactor" / "records.cache"))
    codes = {module: marshal.loads(part) for module, part in cache.items()}
    assert sum(map(len, codes.values())) >= 70
    assert {"compactor.flow.graph", "compactor.providers.base", "compactor_aws.billing"} <= set(codes)
    for sources in codes.values():
        for source, code in sources.items():
            assert code == records.compile_source(source)  # what compiling the source gives, flags included


def test_a_cold_start_compiles_no_record_init_and_each_record_gets_its_own(built_layer: Path) -> None:
    with_cache = import_all(built_layer, built_layer / "compactor" / "records.cache")
    assert with_cache["compiled"] == 0
    assert with_cache["checked"] >= 70 and with_cache["differing"] == []
    without = import_all(built_layer, built_layer / "compactor" / "no-such.cache")
    assert without["compiled"] == with_cache["checked"]  # every one of them compiles without the file


def test_a_cache_of_another_python_or_a_damaged_one_is_not_used(tmp_path: Path) -> None:
    source = "def __record_build__():\n def __init__(self):\n  pass\n return __init__"
    foreign = {"m": marshal.dumps({source: records.compile_source("x = 1")})}
    (tmp_path / "other").write_bytes(b"\x00\x00\r\n" + marshal.dumps(foreign))
    (tmp_path / "damaged").write_bytes(record_cache.dump({"m": {}})[:6])
    assert records.load_cache(str(tmp_path / "other")) == {}
    assert records.load_cache(str(tmp_path / "damaged")) == {}
    assert records.load_cache(str(tmp_path / "missing")) == {}
    written = record_cache.dump({"m": {source: records.compile_source(source)}})
    (tmp_path / "good").write_bytes(written)
    assert marshal.loads(records.load_cache(str(tmp_path / "good"))["m"]) == {source: records.compile_source(source)}


def test_a_stored_code_is_used_for_its_own_module_and_source_only(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "def __record_build__():\n def __init__(self):\n  pass\n return __init__"
    marker = records.compile_source("marker = 1")  # stored under the source, so its use shows
    monkeypatch.setattr(records, "_cache", {"m": marshal.dumps({source: marker})})
    assert records._code(source, "m") == marker
    assert records._code(source, "other") == records.compile_source(source) != marker
    assert records._code(source + "\n", "m") == records.compile_source(source + "\n") != marker
