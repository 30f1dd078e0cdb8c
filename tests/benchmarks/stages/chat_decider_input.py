"""Model input of decisions asked through a chat model: the bytes the ``chat-decisions`` transport sends.

Run: ``.venv/bin/python tests/benchmarks/stages/chat_decider_input.py [FILE|DIR ...]`` (default: the corpus), and
``--cpu`` for the time the decision prompt takes to build on the largest admissible request.

Each transcript is compacted in decision mode as ``tests/benchmarks/model_input.py`` does it, with the decider
offer a chat model (transport ``chat-decisions``: Compactor's decision prompt over the OpenAI wire format, the
path of Bedrock Converse and Anthropic deciders too) against a recording provider on 127.0.0.1; the built-in
offline decider answers each prompt from the payload it was built from, the offline summarizer each summary, so
the choices are ``make demo``'s. Printed per transcript: the decision calls, their request bytes on the wire, the
characters of their user messages (what the model reads of the payload), the decision requests' common prefix,
and a digest of the compacted output (the same digest before and after a change of the prompt: the same
decisions). ``--cpu``: the decision payloads of ``compact_overhead.py``'s 900 KB request (12 batches), each made
into its prompt text (``chat_decisions.payload_text``) against its dense JSON (``dense_dumps``, the prompt's text
before the evidence was embedded): the sum over the request's batches, the best of 20 runs, beside the request's
own thread CPU with the in-process fakes (median of 5). Figures only: a diagnostic with no goal, beside the other
stages' scripts, not run by ``make bench`` (a benchmark there must be able to fail).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from compactor.budget import Deadline
from compactor.jsonutil import dense_dumps
from compactor.models import CompactRequest
from compactor.offline.decider import DECIDER_MODEL
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from compactor.providers import chat_decisions
from compactor.providers.base import DecisionRequest, Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from compactor.service import compact

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_input.py
from model_input import (_DECIDER, _OFFLINE, _SUMMARIZER, KEY_ENV, failed_calls, read, readable,  # noqa: E402
                         summary_reply, transcripts)
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply  # noqa: E402

# The payload each decision prompt was built from, by its user message: the offline decider answers from it.
_ASKED: dict[str, dict[str, Any]] = {}
_decision_messages = chat_decisions.decision_messages


def _recorded_messages(payload: dict[str, Any]) -> list[dict[str, str]]:
    messages = _decision_messages(payload)
    _ASKED[messages[1]["content"]] = payload
    return messages


chat_decisions.decision_messages = _recorded_messages  # what decide_by_chat calls


def recording_provider() -> FakeProviderServer:
    def answer(request: RecordedRequest) -> Reply:
        body = request.json
        if body["model"] == DECIDER_MODEL:
            payload = _ASKED[body["messages"][1]["content"]]
            decided = asyncio.run(_OFFLINE.decide(_DECIDER, DecisionRequest(payload["state"], payload["questions"]),
                                                  30))
            return chat_reply(json.dumps({"answers": decided.answers}), model=body["model"])
        return summary_reply(body)

    provider = FakeProviderServer().start()
    provider.responder = answer
    return provider


def router(base_url: str) -> Router:
    common = {"provider": "bench", "base_url": base_url, "api_key_env": KEY_ENV, "price_in": 1.0, "price_out": 1.0,
              "observations": {"supports_json_mode": True, "context": 10_000_000}}
    return Router((Offer(id="bench/decider", family="d", model=DECIDER_MODEL, protocol="decisions",
                         transport="chat-decisions", **common),
                   Offer(id="bench/summarizer", family="s", model=_SUMMARIZER.model, protocol="chat",
                         transport="openai", **common)), transport_for=transport_for)


def measure(path: Path, provider: FakeProviderServer) -> dict[str, Any]:
    fields, _ = read(path)
    provider.requests.clear()
    request = CompactRequest.model_validate({**fields, "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
    status, body = asyncio.run(compact(request, deadline=Deadline.after_ms(120_000), router=router(provider.base_url)))
    if status != 200:
        raise SystemExit(f"{path.name}: {status} {body}")
    if failed := failed_calls(body):
        raise SystemExit(f"{path.name}: model calls failed: {failed}")
    decisions = [r for r in provider.requests if r.json["model"] == DECIDER_MODEL]
    bodies = [r.body for r in decisions]
    output = body["input" if "input" in body else "messages"]
    return {"name": path.name, "calls": len(decisions), "wire": sum(map(len, bodies)),
            "read": sum(len(r.json["messages"][1]["content"]) for r in decisions),
            "prefix": len(os.path.commonprefix(bodies)) if len(bodies) > 1 else 0,
            "output": hashlib.sha256(dense_dumps(output).encode()).hexdigest()[:12]}


def corpus_figures(paths: list[Path]) -> None:
    provider = recording_provider()
    total_wire = total_read = 0
    try:
        print(f"{'transcript':<60} {'calls':>5} {'wire bytes':>10} {'read chars':>10} {'prefix':>7} {'output':>12}")
        for path in filter(readable, transcripts([str(p) for p in paths])):
            row = measure(path, provider)
            total_wire, total_read = total_wire + row["wire"], total_read + row["read"]
            print(f"{row['name'][:60]:<60} {row['calls']:5d} {row['wire']:10d} {row['read']:10d} {row['prefix']:7d} "
                  f"{row['output']:>12}")
    finally:
        provider.stop()
    print(f"all: decision requests {total_wire} bytes on the wire, user messages {total_read} characters")


def cpu_figures(runs: int = 20) -> None:
    import compact_overhead  # noqa: PLC0415 - its request and transports only here

    captured: list[dict[str, Any]] = []

    class Capturing(compact_overhead.FakeTransport):
        async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> Any:
            captured.append({"state": request.state, "questions": request.questions})
            return await super().decide(offer, request, timeout_s)

    body = compact_overhead.overhead_body()
    asyncio.run(compact_overhead.run_compact(body, Capturing()))
    whole = []
    for _ in range(5):  # the request's own thread CPU with in-process fakes, for scale
        whole.append(asyncio.run(compact_overhead.run_compact(body, compact_overhead.FakeTransport()))[2])
    made = getattr(chat_decisions, "payload_text", dense_dumps)

    def best(build: Any) -> float:
        samples = []
        for _ in range(runs):
            started = time.thread_time()
            for payload in captured:
                build(payload)
            samples.append(time.thread_time() - started)
        return min(samples)

    dense, prompt = best(dense_dumps), best(made)
    print(f"900 KB request: {len(captured)} decision payloads, {sum(len(dense_dumps(p)) for p in captured)} characters "
          f"as dense JSON, {sum(len(made(p)) for p in captured)} as the prompt's user message; built in "
          f"{prompt * 1000:.2f} ms as the prompt ({made.__name__}) against {dense * 1000:.2f} ms as dense JSON "
          f"(thread CPU, best of {runs}); the request itself {statistics.median(whole) * 1000:.1f} ms of thread CPU "
          f"(median of 5, in-process fake transports)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--cpu", action="store_true", help="the prompt's build time on the 900 KB request only")
    args = parser.parse_args()
    os.environ.setdefault(KEY_ENV, "bench-key")
    if args.cpu:
        cpu_figures()
    else:
        corpus_figures(args.paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
