"""End-to-end concurrency: one decision-mode request through ``compactor serve`` and the real HTTP
transports. Run: ``.venv/bin/python tests/benchmarks/e2e_concurrency.py [--runs N]``.

The fake provider of tests/fakes on 127.0.0.1 answers over HTTPS (a test authority's certificate, which the server
trusts: ``SSL_CERT_FILE`` for httpx, ``AWS_CA_BUNDLE`` for boto3) ``/v1/decisions`` (native ``decisions``
transport) and ``/v1/chat/completions`` (``openai`` transport) after a latency L, every fragment ``summarize`` and
every summary a short line; and again Bedrock's Converse (``bedrock`` transport: boto3, signed, each call on a
thread; decisions asked through chat), as a deployment on Bedrock calls it. ``compactor serve`` runs in its own
process with a catalog of two such offers (a decider and a summarizer);
the client posts a request of single-fragment batches (at least 24 of its 32 fragments fit the flow input:
a decision, then a summary each, two provider round trips on the critical path) and times the whole HTTP exchange as a caller
sees it. Each request is a new session of the same shape (``compact_overhead.transcript``'s ``variant``:
other file names in every output), as a warm instance serves many sessions: a re-posted identical body
would find what the first one left in the instance (its salience verdicts, its flow's admission) and make
the later runs easier than a caller's. Printed: wall / (2·L) at L = 200 ms and 1 s; goals <= 1.5 and
<= 1.15 (sequential batches would give the batch count). Until issue 11's twenty-fourth round the provider answered
plain HTTP.

Then, per transport, X-Ray tracing on as deployed (``Tracing: Active``): ``compactor serve`` with the environment
Lambda gives a sampled invocation, one request at L = 200 ms, the server's first compaction (after its readiness
check's ``/v1/healthz``; the only one under its trace header, as every invocation has its own; its wall time holds
the imports and is not judged), which must summarize every batch. Exit 1 when a goal is missed or the provider did not see one decision and one summary per batch, or a
batch was not summarized as the provider answered.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO / "tests")]
from compact_overhead import (  # noqa: E402
    BATCH_OUTPUT_CHARS, BATCHES, MIN_BATCHES, bench_catalog, check_compacted, is_decision, request_body,
    summarize_all_responder, transcript,
)
from cold_start import make_certificates  # noqa: E402
from fakes.provider_server import FakeProviderServer  # noqa: E402

GOALS = {0.2: 1.5, 1.0: 1.15}
TRANSPORTS = ("openai/decisions", "bedrock")
TRACED_LATENCY_S = 0.2


def fake_provider(latency_s: float, certificate: Path, key: Path) -> FakeProviderServer:
    """The provider on 127.0.0.1 over HTTPS (``certificate``, signed by the test authority the server trusts):
    every fragment ``summarize``, every summary a short line, each answer after ``latency_s``; it records every
    request."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    provider = FakeProviderServer(ssl_context=context).start()
    provider.responder = summarize_all_responder(latency_s)
    return provider


def calls(provider: FakeProviderServer) -> dict[str, int]:
    """The provider's decision and chat calls so far."""
    decisions = sum(is_decision(request) for request in provider.requests)
    return {"decisions": decisions, "chat": len(provider.requests) - decisions}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_serve(catalog_path: Path, authority: Path, daemon_port: int | None) -> tuple[subprocess.Popen[bytes], str]:
    """``compactor serve`` on the catalog, trusting the test ``authority`` (httpx through ``SSL_CERT_FILE``, boto3
    through ``AWS_CA_BUNDLE``); with ``daemon_port``, X-Ray tracing on as deployed (``Tracing: Active`` in
    template.yaml): the environment Lambda gives a sampled invocation, its segments sent to that UDP port."""
    port = free_port()
    # This checkout's code, not what the virtualenv's editable install points at (another worktree's, say).
    paths = [str(REPO / "layers" / "compactor"), str(REPO / "cli"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path),
           "COMPACTOR_CATALOG": str(catalog_path), "BENCH_API_KEY": "bench-key",
           "COMPACTOR_FLOW_BUDGET_MS": "20000", "SSL_CERT_FILE": str(authority), "AWS_CA_BUNDLE": str(authority),
           # The Bedrock offers' calls are signed with these, as a function's are with its role's.
           "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "SSL_CERT_DIR", "POWERTOOLS_TRACE_DISABLED",
                 "AWS_SAM_LOCAL", "LAMBDA_TASK_ROOT", "_X_AMZN_TRACE_ID", "AWS_XRAY_DAEMON_ADDRESS"):
        env.pop(name, None)
    if daemon_port is not None:
        env.update({"LAMBDA_TASK_ROOT": str(REPO / "functions" / "compact"), "AWS_LAMBDA_FUNCTION_NAME": "CompactApi",
                    "_X_AMZN_TRACE_ID": f"Root=1-{int(time.time()):08x}-{os.urandom(12).hex()};"
                                        f"Parent={os.urandom(8).hex()};Sampled=1",
                    "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon_port}"})
    server = subprocess.Popen([str(Path(sys.executable).with_name("compactor")), "serve", "--port", str(port)],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{url}/v1/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return server, url
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"compactor serve did not start: {server.stderr.read().decode()[-2000:]}")


def post(url: str, body: bytes) -> tuple[float, dict[str, Any]]:
    request = urllib.request.Request(f"{url}/v1/compact", data=body, method="POST",
                                     headers={"content-type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        payload = json.loads(answer.read())
    return time.perf_counter() - started, payload


def run_requests(url: str, provider: FakeProviderServer, body: Any, runs: int, latency_s: float, *,
                 warm: bool = True) -> tuple[list[float], list[str], int]:
    """``runs`` requests, each a new session, after one not counted (unless not ``warm``): wall / (2·L) of each,
    what was wrong with any (calls missing, batches not summarized as the provider answered), the batches of the
    last."""
    if warm:
        post(url, body("_warm"))  # the first request pays the imports: measured by cold_start.py
    ratios, wrong, batches = [], [], 0
    for run in range(runs):
        provider.requests.clear()
        elapsed, answer = post(url, body(f"_s{run}"))
        report = answer["compaction"]
        made = calls(provider)
        batches = made["decisions"]
        try:  # every candidate summarized as the provider answered: no batch fell back to keeping
            summarized = check_compacted(answer)
        except AssertionError:
            summarized = 0
        if batches < MIN_BATCHES or made["chat"] != batches or summarized != batches:
            errors = sorted({error for error in re.findall(r'"error": "([^"]{0,160})', json.dumps(answer))})
            wrong.append(f"calls {made}, {summarized} summarized, reasons {report['reasons']}, node errors "
                         f"{errors[:3] or 'none'}")
        ratios.append(elapsed / (2 * latency_s))
    return ratios, wrong, batches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="requests per latency (default 3)")
    parser.add_argument("--transports", choices=[*TRANSPORTS, "all"], default="all",
                        help="the offers' transports: openai/decisions over httpx, bedrock, or all (default)")
    args = parser.parse_args()
    # Single-fragment batches, as many as the flow input admits (compact_overhead.BATCH_OUTPUT_CHARS); each
    # request its own session.
    def body(session: str) -> bytes:
        return request_body(transcript(BATCHES, BATCH_OUTPUT_CHARS, variant=session)).encode()
    failed = False
    chosen = [transports for transports in TRANSPORTS if args.transports in (transports, "all")]
    # Each configuration: (transports, L, goal, traced). The traced ones: one request (the server's first
    # compaction, so the only one under its trace header, as every Lambda invocation has its own), judged on its
    # batches only.
    runs = [(transports, latency_s, goal, False) for transports in chosen for latency_s, goal in GOALS.items()]
    runs += [(transports, TRACED_LATENCY_S, None, True) for transports in chosen]
    # The X-Ray daemon's port: segments are sent there by UDP and dropped unread.
    with tempfile.TemporaryDirectory() as scratch, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as daemon:
        daemon.bind(("127.0.0.1", 0))
        certificate, key, authority_pem = make_certificates(Path(scratch))
        authority = Path(scratch) / "authority.pem"
        authority.write_bytes(authority_pem)
        for transports, latency_s, goal, traced in runs:
            provider = fake_provider(latency_s, certificate, key)
            catalog_path = Path(scratch) / "catalog.json"
            catalog_path.write_text(json.dumps(bench_catalog(provider, transports, key_env="BENCH_API_KEY")))
            server, url = start_serve(catalog_path, authority, daemon.getsockname()[1] if traced else None)
            try:
                ratios, wrong, batches = run_requests(url, provider, body, 1 if traced else args.runs, latency_s,
                                                      warm=not traced)
            finally:
                server.terminate()
                server.wait(timeout=10)
                provider.stop()
            median = statistics.median(ratios)
            if traced:
                print(f"e2e_concurrency: {batches} batches through compactor serve + {transports} transports over "
                      f"HTTPS, X-Ray tracing on and the invocation sampled, as deployed, L = {latency_s * 1000:.0f} "
                      f"ms, the server's first compaction: wall / (2·L) {median:.3f} (imports included; not judged), "
                      f"every batch summarized: {'yes  OK' if not wrong else 'no  FAILED'}")
            else:
                verdict = "OK" if median <= goal and not wrong else "ABOVE GOAL" if not wrong else "FAILED"
                print(f"e2e_concurrency: {batches} batches through compactor serve + {transports} transports over "
                      f"HTTPS, L = {latency_s * 1000:.0f} ms, request {len(body('_s0')) / 1000:.0f} KB: wall / (2·L) "
                      f"median {median:.3f}, best {min(ratios):.3f} (n={args.runs}, a new session each; goal <= "
                      f"{goal})  {verdict}")
                failed |= median > goal
            for line in wrong:
                print(f"  unexpected run: {line}")
            failed |= bool(wrong)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
