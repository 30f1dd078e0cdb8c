"""``make soak``: a bounded, loopback-only load run of ``compactor serve`` (docs/reliability.md).

Starts ``compactor serve`` on 127.0.0.1 with the bundled offline catalog (no network, no keys), lets
``SOAK_CLIENTS`` (default 50) clients post ``/v1/compact`` requests (legacy and decision mode, alternating)
for ``SOAK_SECONDS`` (default 60), then stops the server and prints throughput, latency percentiles,
errors and the RSS drift of the server and its worker instances (after a warm-up, to the end). Exits 1 on
any error, or when RSS grew by more than ``SOAK_MAX_RSS_DRIFT_MB`` (default 64): memory must stay flat
under sustained load.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "50"))
SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
WARMUP_S = min(10.0, SECONDS / 6)
MAX_RSS_DRIFT_MB = float(os.environ.get("SOAK_MAX_RSS_DRIFT_MB", "64"))
LONG = "The agent ran the test suite; 3 failures in test_io.py remain after the patch to the reader. " * 6


def transcript() -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(12):
        messages += [{"role": "user", "content": f"step {turn}: {LONG}"},
                     {"role": "assistant", "content": f"done {turn}: {LONG}"}]
    return messages


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants (the server and its worker instances)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(child) for child in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):  # exited meanwhile
            continue
    return total


def wait_ready(url: str, process: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    stop = time.monotonic() + limit_s
    while time.monotonic() < stop:
        if process.poll() is not None:
            sys.exit(f"compactor serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            time.sleep(0.2)
    sys.exit("compactor serve did not become healthy")


def main() -> int:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key != "COMPACTOR_CATALOG"}
    command = Path(sys.executable).parent / "compactor"  # the console script of this virtualenv
    server = subprocess.Popen([str(command), "serve", "--port", str(port)],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(url, server)
        messages = transcript()
        bodies = [json.dumps({"messages": messages, "keep_recent": 4}).encode(),
                  json.dumps({"messages": messages, "keep_recent": 4, "decision_policy_ir": [
                      "policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
                      ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]}).encode()]
        latencies: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()
        started = time.monotonic()
        stop_at = started + SECONDS
        rss: dict[str, float] = {}

        def client(index: int) -> None:
            sent = 0
            while time.monotonic() < stop_at:
                body = bodies[(index + sent) % 2]
                sent += 1
                request = urllib.request.Request(f"{url}/compact", data=body, method="POST",
                                                 headers={"content-type": "application/json"})
                began = time.monotonic()
                try:
                    with urllib.request.urlopen(request, timeout=120) as response:
                        answer = json.loads(response.read())
                        ok = response.status == 200 and isinstance(answer.get("messages"), list)
                except (OSError, ValueError, urllib.error.URLError) as exc:
                    ok, answer = False, {"exception": f"{type(exc).__name__}: {exc}"}
                with lock:
                    if ok:
                        latencies.append(time.monotonic() - began)
                    else:
                        errors.append(str(answer)[:200])

        def sample_rss() -> None:
            time.sleep(WARMUP_S)
            rss["after_warmup"] = rss_mb(server.pid)

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=SECONDS + 180)
        elapsed = time.monotonic() - started
        rss["end"] = rss_mb(server.pid)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000 if latencies else float("nan")

    drift = rss["end"] - rss.get("after_warmup", rss["end"])
    print(f"soak: {CLIENTS} clients, {elapsed:.1f} s, loopback compactor serve (bundled offline catalog)")
    print(f"  requests ok      {len(latencies)}  ({len(latencies) / elapsed:.1f}/s)")
    print(f"  errors           {len(errors)}")
    print(f"  latency ms       p50 {pct(50):.0f}  p95 {pct(95):.0f}  p99 {pct(99):.0f}  "
          f"mean {statistics.fmean(latencies) * 1000 if latencies else float('nan'):.0f}")
    print(f"  server RSS MB    {rss.get('after_warmup', float('nan')):.1f} after warm-up -> {rss['end']:.1f} "
          f"at end (drift {drift:+.1f}, limit {MAX_RSS_DRIFT_MB:.0f})")
    for error in errors[:5]:
        print(f"  error: {error}")
    return 1 if errors or drift > MAX_RSS_DRIFT_MB or not latencies else 0


if __name__ == "__main__":
    sys.exit(main())
