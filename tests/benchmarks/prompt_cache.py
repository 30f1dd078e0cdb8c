"""What prompt-cache markers save on decision input (docs/providers.md "Prompt caching"). Run:
``.venv/bin/python tests/benchmarks/prompt_cache.py [FILE|DIR ...]`` (default: the corpus).

Each transcript is compacted in decision mode twice through the real ``anthropic`` transport against a
provider on 127.0.0.1 that speaks the Messages API, answers with the built-in offline decider and plays a
prompt cache as Anthropic describes it: a marked prefix can be read once the call that wrote it has
answered, and a call that misses writes it; usage reports the cache reads and writes. The decider is
priced (3 USD per million input tokens, output free), the summarizer is free, so the compaction's
``cost_usd``, as Compactor prices it, is the decision input's cost. Once with the offer's markers on
(the default) and once with ``"prompt_cache": false``.

Printed per transcript: the decision calls, the calls that wrote and read the prefix, the prefix's share
of the decision input bytes, and the cost with markers as a share of the cost without. Goal: at most 0.8
over the transcripts with several decision calls, and no transcript above 1.0. Exit 1 when missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from compactor.budget import Deadline
from compactor.models import CompactRequest
from compactor.offline.decider import DECIDER_MODEL
from compactor.offline.transport import BuiltinTransport
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from compactor.providers.base import DecisionRequest, Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from compactor.service import compact
from compactor.transcripts import TranscriptError, parse_transcript

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus"
GOAL = 0.8
PRICE_IN = 3.0
WRITE_S = 0.02  # how long a cache write takes to become readable: calls missing meanwhile write too
_OFFLINE = BuiltinTransport()
_DECIDER = Offer(id="o/d", provider="o", family="d", model=DECIDER_MODEL, protocol="decisions", transport="builtin")


def _tokens(text: str) -> int:
    return len(text.encode("utf-8")) // 4


class CachingProvider(ThreadingHTTPServer):
    """Anthropic Messages (decisions by the offline decider, with a prompt cache) and OpenAI chat ("{}")."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.written: set[str] = set()
        self.calls: list[dict[str, int]] = []  # per decision call: bytes, prefix bytes, read, write

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as tests/fakes/provider_server.py: no 40 ms wait on a kept connection
    server: CachingProvider

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        reply = self._decide(body) if self.path.endswith("/v1/messages") else self._chat(body)
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _decide(self, body: dict[str, Any]) -> dict[str, Any]:
        content = body["messages"][0]["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        marked = [i for i, block in enumerate(blocks) if "cache_control" in block]
        head = body["system"] + "".join(block["text"] for block in blocks[:marked[0] + 1]) if marked else ""
        text = "".join(block["text"] for block in blocks)
        provider = self.server
        with provider.lock:
            hit = head in provider.written
        if head and not hit:
            time.sleep(WRITE_S)
            with provider.lock:
                provider.written.add(head)
        cached = _tokens(head)
        read, write = (cached, 0) if hit else (0, cached)
        with provider.lock:
            provider.calls.append({"bytes": len((body["system"] + text).encode()),
                                   "prefix": len(head.encode()), "read": int(bool(read)), "write": int(bool(write))})
        payload = json.loads(text)
        answer = asyncio.run(_OFFLINE.decide(_DECIDER, DecisionRequest(payload["state"], payload["questions"]), 30))
        return {"id": "m", "type": "message", "role": "assistant", "model": body["model"], "stop_reason": "end_turn",
                "content": [{"type": "text", "text": json.dumps({"answers": answer.answers})}],
                "usage": {"input_tokens": _tokens(body["system"] + text) - cached, "output_tokens": 50,
                          "cache_read_input_tokens": read, "cache_creation_input_tokens": write}}

    @staticmethod
    def _chat(body: dict[str, Any]) -> dict[str, Any]:
        return {"id": "c", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "{}"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}


def router(provider: CachingProvider, markers: bool) -> Router:
    observations = {"supports_json_mode": True, "context": 200_000}
    decider = Offer(id="bench/claude", provider="bench", family="claude", model="claude-bench", protocol="decisions",
                    transport="anthropic", base_url=provider.root_url, price_in=PRICE_IN, price_out=0.0,
                    observations={**observations, "prompt_cache": markers})
    summarizer = Offer(id="bench/chat", provider="bench", family="chat", model="chat", protocol="chat",
                       transport="openai", base_url=provider.root_url + "/v1", price_in=0.0, price_out=0.0,
                       observations=observations)
    return Router((decider, summarizer), transport_for=transport_for)


def measure(path: Path, messages: list[dict[str, Any]], fields: dict[str, Any],
            provider: CachingProvider) -> dict[str, Any]:
    result: dict[str, Any] = {"name": path.name}
    for markers in (True, False):
        provider.calls.clear()
        provider.written.clear()
        request = CompactRequest.model_validate({**fields, "messages": messages,
                                                 "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
        status, body = asyncio.run(compact(request, deadline=Deadline.after_ms(120_000),
                                           router=router(provider, markers)))
        nodes = body.get("x_router", {}).get("decision_trace", {}).get("flow_nodes", [])
        if status != 200 or any(node.get("error") for node in nodes):
            raise SystemExit(f"{path.name}: the compaction failed or a model call failed: {status}")
        cost = body.get("x_router", {}).get("cost_usd")
        if cost is None:  # unknown is not free: counted as 0 it would read as a saving
            raise SystemExit(f"{path.name}: the compaction's cost is unknown (markers {'on' if markers else 'off'})")
        result["cost" if markers else "full"] = cost
        if markers:
            calls = list(provider.calls)
            result.update(calls=len(calls), writes=sum(c["write"] for c in calls), reads=sum(c["read"] for c in calls),
                          prefix=sum(c["prefix"] for c in calls) / max(1, sum(c["bytes"] for c in calls)))
    result["ratio"] = result["cost"] / result["full"] if result["full"] else None
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[CORPUS])
    args = parser.parse_args()
    files = sorted(p for root in args.paths for p in ([root] if root.is_file() else root.rglob("*"))
                   if p.suffix in (".json", ".jsonl") and p.is_file())
    provider = CachingProvider()
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    print(f"{'transcript':58} {'calls':>5} {'writes':>6} {'reads':>5} {'prefix':>6} {'cost':>5}")
    ratios: list[float] = []
    worst = 0.0
    for path in files:
        try:
            messages, fields = parse_transcript(path.read_text(encoding="utf-8"))
        except TranscriptError as exc:  # not a chat transcript (e.g. a Codex rollout)
            print(f"{path.name[:58]:58} skipped: {exc}")
            continue
        row = measure(path, messages, fields, provider)
        ratio = row["ratio"]
        shown = "-" if ratio is None else f"{ratio:.2f}"
        print(f"{path.name[:58]:58} {row['calls']:5} {row['writes']:6} {row['reads']:5} {row['prefix']:6.0%} {shown:>5}")
        if ratio is not None:
            worst = max(worst, ratio)
            if row["calls"] > 1:
                ratios.append(ratio)
    provider.shutdown()
    if not ratios:
        print("no transcript made several decision calls")
        return 1
    mean = statistics.mean(ratios)
    print(f"decision input cost with markers / without: mean {mean:.2f} over {len(ratios)} transcripts with several "
          f"decision calls (goal <= {GOAL}), worst {worst:.2f} (goal <= 1.0)")
    return 0 if mean <= GOAL and worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
