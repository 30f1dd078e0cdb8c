"""The built layer's stored code (``compactor.build_cache``; docs/performance.md#the-workers-cold-start-seventh-round-issue-11):
the records' ``__init__`` (``records.cache``), the patterns' programs (``patterns.cache``) and the fingerprint's
weights (``values.cache``). The layer's recipe writes them, a cold start compiles no record's ``__init__`` and no
pattern and computes no weight with them, every record gets exactly the ``__init__`` compiling its source gives,
every pattern equals ``re.compile``'s and the weights are the powers they stand for."""

from __future__ import annotations

import json
import marshal
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import _sre

from compactor import build_cache, patterns, records

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "compactor"

# In a fresh process over a built layer: import every module of its packages with ``records.cache`` (or
# none), count the ``__init__`` sources compiled, then rebuild each record's ``__init__`` from its source
# without the file and compare it with the one the class got.
_IMPORT_ALL = textwrap.dedent("""\
    import dataclasses, importlib, json, pkgutil, sys
    sys.path.insert(0, {layer!r})
    from compactor import patterns, records
    records.CACHE_FILE, patterns.CACHE_FILE = {cache!r}, {pattern_cache!r}
    compiled, regexes = [], []
    compile_source = records.compile_source
    records.compile_source = lambda source: compiled.append(source) or compile_source(source)
    class Counted:
        def __getattr__(self, name):
            return getattr(re, name)
        def compile(self, source, flags=0):
            regexes.append(source)
            return re.compile(source, flags)
    import re
    patterns.re = Counted()
    for package in ("compactor", "compactor_aws"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            importlib.import_module(info.name)
    asked, at_import = sorted(set(patterns.ASKED)), len(regexes)
    built = [patterns.pattern(source, flags) for source, flags in asked]  # the lazy ones too
    unequal = [source for (source, flags), built in zip(asked, built) if built != re.compile(source, flags)
               or built.groupindex != re.compile(source, flags).groupindex]
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
    print(json.dumps({{"compiled": len(compiled), "checked": checked, "differing": differing,
                      "asked": len(asked), "at_import": at_import, "regexes": len(regexes),
                      "unequal": unequal}}))
""")


_ASKED = textwrap.dedent("""\
    import importlib, json, pkgutil, sys
    sys.path.insert(0, {layer!r})
    from compactor import patterns
    for package in ("compactor", "compactor_aws"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            importlib.import_module(info.name)
    print(json.dumps(sorted(set(patterns.ASKED))))
""")


@pytest.fixture(scope="module")
def built_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer's packages as its recipe builds them (``make code``): bytecode and ``records.cache``."""
    root = tmp_path_factory.mktemp("layer")
    subprocess.run(["make", "-s", "-C", str(LAYER), "code", f"ARTIFACTS_DIR={root}", f"PYTHON={sys.executable}"],
                   check=True, capture_output=True)
    return root / "python"


def import_all(layer: Path, cache: Path, pattern_cache: Path) -> dict[str, object]:
    script = _IMPORT_ALL.format(layer=str(layer), cache=str(cache), pattern_cache=str(pattern_cache))
    done = subprocess.run([sys.executable, "-B", "-c", script],
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
    stored = built_layer / "compactor"
    with_cache = import_all(built_layer, stored / "records.cache", stored / "patterns.cache")
    assert with_cache["compiled"] == 0 and with_cache["regexes"] == 0
    assert with_cache["checked"] >= 70 and with_cache["differing"] == []
    assert with_cache["asked"] >= 25 and with_cache["unequal"] == []
    without = import_all(built_layer, stored / "no-such.cache", stored / "no-such.cache")
    assert without["compiled"] == with_cache["checked"]  # every one of them compiles without the files
    assert without["at_import"] >= 15 and without["unequal"] == []


def test_the_recipe_stores_the_program_of_every_pattern_the_layer_asks_for(built_layer: Path) -> None:
    stored = patterns.load(str(built_layer / "compactor" / "patterns.cache"))
    assert len(stored) >= 25
    for (source, flags), program in stored.items():
        assert _sre.compile(source, *program) == re.compile(source, flags)
    asked = subprocess.run([sys.executable, "-B", "-c", _ASKED.format(layer=str(built_layer))], capture_output=True,
                           text=True, check=True, cwd=built_layer).stdout
    assert set(stored) == {tuple(key) for key in json.loads(asked)}  # every one asked for, none dropped


def test_a_cache_of_another_python_or_a_damaged_one_is_not_used(tmp_path: Path) -> None:
    source = "def __record_build__():\n def __init__(self):\n  pass\n return __init__"
    foreign = {"m": marshal.dumps({source: records.compile_source("x = 1")})}
    (tmp_path / "other").write_bytes(b"\x00\x00\r\n" + marshal.dumps(foreign))
    (tmp_path / "damaged").write_bytes(build_cache.dump({"m": {}})[:6])
    assert records.load_cache(str(tmp_path / "other")) == {}
    assert records.load_cache(str(tmp_path / "damaged")) == {}
    assert records.load_cache(str(tmp_path / "missing")) == {}
    written = build_cache.dump({"m": {source: records.compile_source(source)}})
    (tmp_path / "good").write_bytes(written)
    assert marshal.loads(records.load_cache(str(tmp_path / "good"))["m"]) == {source: records.compile_source(source)}


def test_a_stored_code_is_used_for_its_own_module_and_source_only(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "def __record_build__():\n def __init__(self):\n  pass\n return __init__"
    marker = records.compile_source("marker = 1")  # stored under the source, so its use shows
    monkeypatch.setattr(records, "_cache", {"m": marshal.dumps({source: marker})})
    assert records._code(source, "m") == marker
    assert records._code(source, "other") == records.compile_source(source) != marker
    assert records._code(source + "\n", "m") == records.compile_source(source + "\n") != marker


def test_stored_programs_of_another_engine_or_damaged_ones_are_not_used(tmp_path: Path) -> None:
    keys = [(r"(?P<name>\w+)=(\d+)?", 0), ("^task: (.*)$", re.MULTILINE), ("ab+c", re.IGNORECASE | re.DOTALL)]
    written = patterns.dump(keys)
    (tmp_path / "good").write_bytes(written)
    good = patterns.load(str(tmp_path / "good"))
    assert set(good) == {(source, int(flags)) for source, flags in keys}
    for (source, flags), program in good.items():
        built = _sre.compile(source, *program)
        assert built == re.compile(source, flags) and built.groupindex == re.compile(source, flags).groupindex
    magic = written[:len(written) - len(marshal.dumps((patterns._ENGINE, good)))]
    tag = sys.implementation.cache_tag
    (tmp_path / "engine").write_bytes(magic + marshal.dumps(((_sre.MAGIC + 1, tag), good)))
    (tmp_path / "minor").write_bytes(magic + marshal.dumps(((_sre.MAGIC, tag + "0"), good)))
    (tmp_path / "python").write_bytes(b"\x00\x00\r\n" + marshal.dumps((patterns._ENGINE, good)))
    (tmp_path / "damaged").write_bytes(written[:-7])
    for name in ("engine", "minor", "python", "damaged", "missing"):
        assert patterns.load(str(tmp_path / name)) == {}


_OTHER_RELEASE = textwrap.dedent("""\
    import json, sys
    sys.version = "3.12.99 (main, Jan  1 2030, 00:00:00) [GCC 11.4.1 20230605 (Red Hat 11.4.1-2)]"  # Lambda's, say
    sys.path.insert(0, {layer!r})
    from compactor import patterns
    print(json.dumps(len(patterns.load({path!r}))))
""")


def test_stored_programs_are_read_by_another_patch_release_of_the_same_python(tmp_path: Path) -> None:
    # The layer is built by the operator's Python 3.12 and run by Lambda's, another patch release (another
    # sys.version): the programs must still be read there, as the layer's bytecode is (docs/performance.md).
    keys = [(r"(?P<name>\w+)=(\d+)?", 0), ("^task: (.*)$", re.MULTILINE)]
    (tmp_path / "patterns.cache").write_bytes(patterns.dump(keys))
    script = _OTHER_RELEASE.format(layer=str(Path(patterns.__file__).parents[1]), path=str(tmp_path / "patterns.cache"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == len(keys)


def test_a_stored_program_is_used_for_its_own_source_and_flags_only(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = patterns.program("marker")  # stored under another source, so its use shows
    monkeypatch.setattr(patterns, "_stored", {("a+", 0): marker})
    assert patterns.pattern("a+").pattern == "a+" and patterns.pattern("a+").match("marker")
    assert patterns.pattern("a+", re.IGNORECASE) == re.compile("a+", re.IGNORECASE)
    assert patterns.pattern("a+b") == re.compile("a+b")
    accessor = patterns.lazy("a+")
    assert accessor.cache_info().currsize == 0 and accessor().match("marker") and accessor() is accessor()


_IDENTITY = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, {layer!r})
    from compactor import stored_values
    stored_values.CACHE_FILE = {cache!r}
    computed = []
    import itertools
    accumulate = itertools.accumulate
    itertools.accumulate = lambda *a, **k: computed.append(1) or accumulate(*a, **k)
    from compactor import identity
    itertools.accumulate = accumulate
    print(json.dumps({{"computed": len(computed), "w1": identity._W1, "w2": identity._W2,
                      "fingerprints": [identity.fingerprint(text) for text in ("", "a", "é" * 3000, "x" * 9000)]}}))
""")


def test_the_recipe_stores_the_fingerprint_s_weights_as_computed(built_layer: Path) -> None:
    from compactor import identity

    def run(cache: Path) -> dict[str, object]:
        script = _IDENTITY.format(layer=str(built_layer), cache=str(cache))
        done = subprocess.run([sys.executable, "-B", "-c", script], capture_output=True, text=True, check=True,
                              cwd=built_layer)
        return json.loads(done.stdout.splitlines()[-1])

    stored, computed = run(built_layer / "compactor" / "values.cache"), run(built_layer / "compactor" / "none.cache")
    assert stored["computed"] == 0 and computed["computed"] == 2  # read, not computed
    assert stored["w1"] == [float(pow(31, identity._CHUNK - 1 - i, 2147483647)) for i in range(identity._CHUNK)]
    assert stored["w2"] == [float(pow(37, identity._CHUNK - 1 - i, 2147483629)) for i in range(identity._CHUNK)]
    assert stored["fingerprints"] == computed["fingerprints"] == [
        identity.fingerprint(text) for text in ("", "a", "é" * 3000, "x" * 9000)]


def test_a_stored_table_is_used_for_its_own_name_arguments_and_code_only(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    from compactor import stored_values

    def table(n: int) -> tuple[int, ...]:
        return tuple(range(n))

    def other(n: int) -> tuple[int, ...]:
        return tuple(range(1, n + 1))

    (tmp_path / "values").write_bytes(stored_values.dump([("t", (3,), table)]))
    loaded = stored_values.load(str(tmp_path / "values"))
    assert loaded == {stored_values.key("t", (3,), table): (0, 1, 2)}
    monkeypatch.setattr(stored_values, "_stored", {stored_values.key("t", (3,), table): ("stored",)})
    assert stored_values.value("t", (3,), table) == ("stored",)
    assert stored_values.value("t", (3,), other) == (1, 2, 3)  # another function: computed
    assert stored_values.value("t", (4,), table) == (0, 1, 2, 3)  # other arguments
    assert stored_values.value("u", (3,), table) == (0, 1, 2)  # another name
    (tmp_path / "python").write_bytes(b"\x00\x00\r\n" + marshal.dumps(loaded))
    assert stored_values.load(str(tmp_path / "python")) == {}


def test_a_damaged_module_part_or_program_compiles_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "def __record_build__():\n def __init__(self):\n  pass\n return __init__"
    monkeypatch.setattr(records, "_cache", {"m": b"\xff damaged", "n": marshal.dumps([1, 2])})
    assert records._code(source, "m") == records.compile_source(source)
    assert records._code(source, "n") == records.compile_source(source)
    monkeypatch.setattr(patterns, "_stored", {("a+", 0): ("not", "a", "program"), ("b+", 0): (32, [1, 2], 0, {}, ())})
    assert patterns.pattern("a+") == re.compile("a+")
    assert patterns.pattern("b+") == re.compile("b+")


def test_the_build_step_names_its_directory(capsys: pytest.CaptureFixture[str]) -> None:
    """No default directory: files written into the source tree would be read by its tests and ``serve``."""
    assert build_cache.main([]) == 2
    assert "usage" in capsys.readouterr().err
