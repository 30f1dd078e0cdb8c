"""The SnapStart hooks: warm offline before the snapshot, fresh randomness and connections after."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import types

import pytest

from compactor.container import reset_router
from compactor_aws import snapstart


@pytest.fixture(autouse=True)
def _fresh_router():
    reset_router()
    yield
    reset_router()


def test_before_snapshot_warms_without_any_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("the before-snapshot hook must not open a connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    # Lambda puts the role's credentials in the environment; without them botocore would ask IMDS.
    for name, value in {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COMPACTOR_USAGE_TABLE", "usage")
    from compactor_aws import ledger, s3_store

    s3_store.reset_client()
    ledger.reset_client()
    snapstart.before_snapshot()
    # botocore's service models are loaded before the snapshot
    assert s3_store.CLIENT.value is not None and ledger.CLIENT.value is not None
    s3_store.reset_client()
    ledger.reset_client()


def test_before_snapshot_never_calls_the_configured_providers(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog of real HTTP offers is loaded, but the warm-up compactions run on the offline offers."""
    catalog = tmp_path / "catalog.json"
    catalog.write_text('{"offers": [{"id": "x/chat", "provider": "x", "family": "f", "model": "m", '
                       '"protocol": "chat", "transport": "openai", "base_url": "http://192.0.2.1/v1"}]}')
    monkeypatch.setenv("COMPACTOR_CATALOG", str(catalog))
    from compactor.catalog import reset_catalog_cache

    reset_catalog_cache()
    import socket

    monkeypatch.setattr(socket.socket, "connect", lambda *a, **k: (_ for _ in ()).throw(AssertionError("network")))
    try:
        snapstart.before_snapshot()
    finally:
        reset_catalog_cache()


def test_after_restore_reseeds_and_drops_pooled_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.providers import http
    from compactor_aws import ledger, s3_store, secrets

    random.seed(7)
    expected_without_reseed = random.Random(7)
    expected_without_reseed.random()
    loop = asyncio.new_event_loop()
    http._clients[loop] = object()  # type: ignore[assignment]
    s3_store.CLIENT.value = object()
    ledger.CLIENT.value = object()
    monkeypatch.setitem(secrets._keys, "prod/key", ("sk-read-before-the-snapshot", time.monotonic()))
    assert secrets.cached_secret_key("prod/key") == "sk-read-before-the-snapshot"
    monkeypatch.setitem(http._heads, ("https://x/v1", (("Authorization", "Bearer sk-read-before-the-snapshot"),), ()),
                        [(b"Authorization", b"Bearer sk-read-before-the-snapshot")])
    snapstart.after_restore()
    loop.close()
    assert len(http._clients) == 0 and s3_store.CLIENT.value is None and ledger.CLIENT.value is None
    assert http._heads == {}  # the request heads kept before the snapshot hold its keys
    assert secrets.cached_secret_key("prod/key") is None  # read again after a restore
    assert random.random() != expected_without_reseed.random()


def test_register_uses_the_runtime_library_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: dict[str, object] = {}
    fake = types.ModuleType("snapshot_restore_py")
    fake.register_before_snapshot = lambda fn: registered.setdefault("before", fn)  # type: ignore[attr-defined]
    fake.register_after_restore = lambda fn: registered.setdefault("after", fn)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", fake)
    assert snapstart.register() is True
    assert registered == {"before": snapstart.before_snapshot, "after": snapstart.after_restore}


def test_register_is_a_no_op_outside_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)
    assert snapstart.register() is False


def test_after_restore_imports_no_provider_transport() -> None:
    """A restore pays for what the function uses: a container that never loaded the HTTP transports
    (the worker on built-in offers) has no pooled client to drop, and does not import httpx to find out."""
    code = ("import sys; from compactor_aws import snapstart; snapstart.after_restore(); "
            "print(sorted({'compactor.providers.http', 'httpx'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.stdout.strip() == "[]"


def test_before_snapshot_imports_the_configured_offers_transports(tmp_path) -> None:
    """A catalog of HTTP offers: httpx and the transports are in the snapshot, not imported by every restored
    container's first provider call; no client is built (a restore would drop it)."""
    catalog = tmp_path / "catalog.json"
    catalog.write_text('{"offers": [{"id": "x/chat", "provider": "x", "family": "f", "model": "m", '
                       '"protocol": "chat", "transport": "openai", "base_url": "http://192.0.2.1/v1"}]}')
    code = ("import sys; from compactor_aws import snapstart; before = 'httpx' in sys.modules; "
            "snapstart.before_snapshot(); from compactor.providers import http; "
            "print(before, 'compactor.providers.openai' in sys.modules, len(http._clients))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "COMPACTOR_CATALOG": str(catalog)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.split() == ["False", "True", "0"]


def test_before_snapshot_loads_the_codec_a_first_connection_needs() -> None:
    """urllib3 checks each host name with the IDNA codec when it connects: the codec's modules are in the
    snapshot, not imported by every restored container's first request."""
    code = ("import sys; from compactor_aws import snapstart; before = 'encodings.idna' in sys.modules; "
            "snapstart.before_snapshot(); print(before, 'encodings.idna' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.split() == ["False", "True"]


_HOOKS_PROBE = """\
import json, sys, types
registered = []
fake = types.ModuleType("snapshot_restore_py")
fake.register_before_snapshot = lambda fn: registered.append("before")
fake.register_after_restore = lambda fn: registered.append("after")
sys.modules["snapshot_restore_py"] = fake
sys.path.insert(0, {function_dir!r})
import {module}
print(json.dumps(registered))
"""


@pytest.mark.parametrize("module", ["compact", "s3_compact", "flow_worker", "window_jobs"])
def test_every_function_with_random_state_registers_both_hooks(module: str) -> None:
    # template.yaml applies SnapStart to every function: each restored container must re-seed `random` (retry
    # jitter) and drop clients; only the authorizer, which holds no random state or client, registers none.
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    script = _HOOKS_PROBE.format(function_dir=str(repo / "functions" / module), module=module)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo,
                          env={**__import__("os").environ, "AWS_DEFAULT_REGION": "us-east-1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == '["before", "after"]'


def test_before_snapshot_warms_a_window_item_of_a_windowed_jobs_worker() -> None:
    """A windowed job's worker (its handler imports ``compactor.large_jobs`` at init): the windows module and one
    window's ``compact_window`` run on the offline offers are in the snapshot, not in a restored Map item's first
    request; no connection is opened (docs/performance.md#snapstart)."""
    code = ("import socket, sys; socket.socket.connect = None; from compactor import large_jobs; "
            "from compactor_aws import snapstart; windows = []; "
            "sys.setprofile(lambda frame, event, arg: windows.append(1) if event == 'call' and "
            "frame.f_code.co_name == 'compact_window' else None); "
            "snapstart.before_snapshot(); sys.setprofile(None); "
            "print('compactor.compaction.windows' in sys.modules, len(windows) > 0)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.split() == ["True", "True"]


def test_before_snapshot_leaves_the_windows_out_of_other_functions() -> None:
    """The API and the fan-out worker never import ``compactor.large_jobs`` at init: their snapshot has no windows."""
    code = ("import sys; from compactor_aws import snapstart; snapstart.before_snapshot(); "
            "print('compactor.compaction.windows' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.split() == ["False"]


def _restored_first_request(function: str, script: str, event: dict[str, object], tmp_path) -> dict[str, object]:
    """Run ``script`` in a fresh interpreter with ``function``'s handler directory on its path and ``event`` (JSON)
    in a file: the handler imported, ``before_snapshot``, ``after_restore``, then the first request, as
    ``tests/benchmarks/cold_start.py``'s restored sample runs them (no tables: the local ledger and idempotency)."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    event_file = tmp_path / "event.json"
    event_file.write_text(__import__("json").dumps(event))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    for name in ("COMPACTOR_USAGE_TABLE", "COMPACTOR_IDEMPOTENCY_TABLE", "_X_AMZN_TRACE_ID"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", script, str(repo / "functions" / function), str(event_file)],
                          capture_output=True, text=True, cwd=repo, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return __import__("json").loads(done.stdout.strip().splitlines()[-1])


def _real_request_body() -> str:
    """A real agent transcript of the corpus's median size (132 messages, five batches in decision mode) as
    ``compactor compact FILE --mode decision`` sends it, with the decision event's settings."""
    import json
    from pathlib import Path

    from compactor.transcripts import read_transcript

    repo = Path(__file__).resolve().parents[3]
    settings = json.loads(json.loads((repo / "tests" / "events" / "compact-decision.json").read_text())["body"])
    settings.pop("messages")
    corpus = repo / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"
    return json.dumps(read_transcript(corpus.read_text(encoding="utf-8")).compact_body(settings, mode="decision"))


_CONTEXT = """
class Context:
    function_name = "f"; memory_limit_in_mb = 1024; aws_request_id = "restored"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:f"
    log_group_name = log_stream_name = function_version = "1"
    def get_remaining_time_in_millis(self): return 60000
"""

_API_FIRST_REQUEST = """
import json, sys
sys.path.insert(0, sys.argv[1])
import compact
from compactor_aws import snapstart
snapstart.before_snapshot()
snapstart.after_restore()
event = json.loads(open(sys.argv[2]).read())
before = set(sys.modules)
""" + _CONTEXT + """
answer = compact.handler(event, Context())
body = json.loads(answer["body"])
nodes = body["x_router"]["decision_trace"]["flow_nodes"]
print(json.dumps({"status": answer["statusCode"], "decisions": sum(node["kind"] == "decision" for node in nodes),
                  "new": [name for name in sys.modules if name not in before]}))
"""

_S3_FIRST_REQUEST = """
import json, sys
from moto import mock_aws
with mock_aws():
    import boto3
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="transcripts")
    body = json.loads(open(sys.argv[2]).read())["body"].encode()
    put = s3.put_object(Bucket="transcripts", Key="incoming/run.json", Body=body)
    sys.path.insert(0, sys.argv[1])
    import s3_compact
    from compactor_aws import snapstart
    snapstart.before_snapshot()
    snapstart.after_restore()
    event = {"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
                          "eventTime": "2026-01-01T00:00:00.000Z", "eventName": "ObjectCreated:Put",
                          "s3": {"bucket": {"name": "transcripts", "arn": "arn:aws:s3:::transcripts"},
                                 "object": {"key": "incoming/run.json", "size": len(body),
                                            "eTag": put["ETag"].strip('"')}}}]}
    before = set(sys.modules)
""" + "\n".join("    " + line for line in _CONTEXT.splitlines()) + """
    answer = s3_compact.handler(event, Context())
    print(json.dumps({"results": [r["result"] for r in answer["results"]],
                      "new": [name for name in sys.modules if name not in before]}))
"""


def test_a_restored_api_functions_real_size_first_request_imports_nothing(tmp_path) -> None:
    """After the hook, the API's first real request (five batches) imports no module: billing, the fan-out runner's
    check and the codec of the decision mode's plain escapes are in the snapshot, not in a restored container's
    first request (docs/performance.md#snapstart)."""
    import json
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    event = json.loads((repo / "tests" / "events" / "compact-decision.json").read_text())
    event["body"] = _real_request_body()
    seen = _restored_first_request("compact", _API_FIRST_REQUEST, event, tmp_path)
    assert seen["status"] == 200 and seen["decisions"] == 5
    assert seen["new"] == []


def test_a_restored_s3_functions_real_size_first_request_imports_nothing(tmp_path) -> None:
    """After the hook, the S3 function's first real object imports no module: billing and the transcript reader are
    in the snapshot (docs/performance.md#snapstart)."""
    seen = _restored_first_request("s3_compact", _S3_FIRST_REQUEST, {"body": _real_request_body()}, tmp_path)
    assert seen["results"] == ["compacted"]
    assert seen["new"] == []


def test_before_snapshot_compacts_a_request_of_several_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Besides the tiny compactions (one batch each), the hook compacts a request shaped like a real one: several
    decision batches of tool-call units, so the multi-batch paths run before the snapshot."""
    from compactor import service

    answers: list[dict[str, object]] = []
    compact = service.compact

    async def recording(request, **kwargs):
        status, body = await compact(request, **kwargs)
        answers.append(body)
        return status, body

    monkeypatch.setattr(service, "compact", recording)
    for name, value in {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    snapstart.before_snapshot()
    decisions = [sum(node["kind"] == "decision" for node in body["x_router"]["decision_trace"]["flow_nodes"])
                 for body in answers if body.get("x_router", {}).get("decision_trace", {}).get("flow_nodes")]
    assert max(decisions) >= 2
    assert any(message.get("tool_calls") for message in snapstart.real_shaped_messages())
