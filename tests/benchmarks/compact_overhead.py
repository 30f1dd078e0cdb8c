"""Overhead of a decision-mode ``/v1/compact`` request around its model calls.

Run: ``.venv/bin/python tests/benchmarks/compact_overhead.py [--runs N] [--latency-ms L] [--profile]``

1. CPU overhead: the largest admissible request (about 900 KB, 128 candidate fragments, tool-call
   units with bulky outputs that later units re-read, every candidate in a batch, and a large protected
   tail), each run a new session of the same shape (other file names) on a new router.
   The goal's figure is the thread's CPU time for the whole request as the deployed API function answers it:
   its handler (``functions/compact/compact.py``) on the API Gateway proxy event of ``POST /v1/compact``, the
   router the container's (a new one each run, built before the clock), the model calls through the real
   ``decisions`` and ``openai`` transports (httpx and its pooled client on the container's event loop) to the
   fake provider of tests/fakes in a process of its own, answering at once: the event admitted, Powertools'
   resolver and its request validation (the body parsed by ``bounded_loads`` and validated as
   ``CompactRequest``), ``service.compact`` (preparation, materialisation, flow admission, the run with its 24
   model calls encoded, sent and their answers read over loopback HTTPS, reassembly), the call observed and
   billed (metrics, billing line, the ledger entry written by botocore to the usage table on a moto server in
   its own process), the answer encoded, and the proxy response encoded as the Lambda runtime sends it; as a ratio to the thread CPU of one ``json.loads`` +
   ``json.dumps`` round trip of the same body (the floor of a request that reads its body and writes an answer:
   about 1), the median of N runs (after a first one, not counted) against the median of round trips timed
   beside each run. Goal ≤ 6. Thread CPU, not wall time: the wall time also holds the provider's own work, and
   the load of other processes on a shared machine inflates it far more (it is printed, not judged). X-Ray
   tracing is off (docs/performance.md says why). Until issue 11's fourteenth round the figure was the same
   request against in-process fake transports, which leave out the calls' JSON encoding and httpx (about half
   the request's CPU), and until its twenty-fourth it left out the handler around ``service.compact`` (the
   resolver, its validation, billing and the proxy response, about 3 ms): easier figures than the name says.
   The figure without the handler is printed after it, then the fakes' and ``service.compact`` alone; every
   run must have compacted every candidate as the provider answered (a run whose calls failed is faster).
   Then, not for the goal, with the fakes: a warm router's other
   sessions, the same request again (admitted from the router's cache) and a new process's first request.
   ``--profile`` prints the cProfile top hotspots of one run.
2. Concurrency: the fake transports answer after a latency L (``asyncio.sleep``); a request that makes
   32 batches (32 decision calls, then 32 summary calls) should take about 2·L. Prints wall / (2·L);
   goal ≤ 1.25 (sequential batches would give 32).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from compactor.budget import Deadline
from compactor.jsonutil import bounded_loads, dense_dumps
from compactor.models import CompactRequest
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from compactor.providers.base import ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from compactor.service import compact

REPO_ROOT = Path(__file__).resolve().parents[2]
OVERHEAD_GOAL = 6.0
CONCURRENCY_GOAL = 1.25
BATCHES = 32
FRAGMENT_OUTPUT_CHARS = 4200
TAIL_OUTPUT_CHARS = 332_000
# Items of ~25.3 KB: two never fit one batch's 50 000-byte summary record, so every fragment is a batch of
# its own; with the state every batch carries, the 900 000-byte flow input admits all 32 (at least MIN_BATCHES).
BATCH_OUTPUT_CHARS = 25_000
REREAD_AFTER = 8
MIN_BATCHES = 24
FIRST_REQUESTS = 3
OFFERS = (
    Offer(id="bench/decider", provider="bench", family="decider", model="decider-1", protocol="decisions",
          transport="bench", price_in=0.5, price_out=2.0, observations={"supports_json_mode": True}),
    Offer(id="bench/summarizer", provider="bench", family="summarizer", model="summarizer-1", protocol="chat",
          transport="bench", price_in=3.0, price_out=15.0, observations={"supports_json_mode": True}),
)


class FakeTransport:
    """Answers after ``latency_s``: every fragment ``summarize``, every summary a short string.

    A real provider parses the prompt in its own process, so the fake does not parse it either (about
    0.5 ms of JSON per request would otherwise count as Compactor's overhead): a summary prompt is the
    batch's items as a JSON object (docs/performance.md), whose first key is one of the fragment ids of a
    decision this transport answered, so the reply is the batch's answer built from those ids. A prompt
    it cannot place (it never happens here) is parsed. Compactor's own work on the answers (parsing the
    reply, checking it, overlaying the summaries) is the same as with a parsing fake."""

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.decisions = 0
        self.chats = 0
        self.batches: dict[str, list[str]] = {}  # first fragment id of a decided batch -> its ids

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        self.decisions += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        answers = {fid: {"type": "choice", "choice": "summarize", "confidence": 0.9} for fid in request.questions}
        ids = list(request.questions)
        self.batches[ids[0]] = ids
        return DecisionResponse(model=offer.model, answers=answers, tokens_in=5000, tokens_out=40)

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        self.chats += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        prompt = request.messages[-1]["content"]
        first = prompt[2:prompt.find('"', 2)] if prompt.startswith('{"') else None
        items = self.batches.get(first) if first else None  # every fragment of a batch is summarised
        if items is None:
            items = list(json.loads(prompt))
        text = json.dumps({fid: f"ran step {fid}; exit 0; output elided" for fid in items})
        return ChatResponse(text=text, finish_reason="stop", tokens_in=20000, tokens_out=300)


def router_for(transport: FakeTransport) -> Router:
    return Router(OFFERS, transport_for=lambda offer: transport)


PROVIDER_KEY_ENV = "COMPACT_OVERHEAD_PROVIDER_KEY"
USAGE_TABLE = "compactor-usage-overhead-bench"


def bench_catalog(provider: Any, transports: str = "openai/decisions", *, key_env: str) -> dict[str, Any]:
    """A catalog (``COMPACTOR_CATALOG``) of the decider's and the summarizer's offers on the fake provider of
    tests/fakes (``provider``): ``decisions`` and ``openai`` over httpx (``openai/decisions``), their key in the
    environment variable ``key_env``, or both on ``bedrock`` (its root URL as the endpoint)."""
    common: dict[str, Any] = {"provider": "bench", "supports_json_mode": True, "context": 1_000_000}
    if transports == "bedrock":
        common |= {"base_url": provider.root_url, "region": "us-east-1"}
        decider, summarizer = "bedrock", "bedrock"
    else:
        common |= {"base_url": provider.base_url, "api_key_env": key_env}
        decider, summarizer = "decisions", "openai"
    return {"offers": [
        {"id": "bench/decider", "family": "decider", "model": "decider-1", "protocol": "decisions",
         "transport": decider, "price_in": 0.5, "price_out": 2.0, **common},
        {"id": "bench/summarizer", "family": "summarizer", "model": "summarizer-1", "protocol": "chat",
         "transport": summarizer, "price_in": 3.0, "price_out": 15.0, **common},
    ]}


def converse_asked(body: dict[str, Any]) -> Any:
    """What a Bedrock Converse call asks, parsed: the JSON of its last message's text blocks (a decision asked
    through chat, ``{state, questions}``, or a summary's items)."""
    return json.loads("".join(block.get("text", "") for block in body["messages"][-1]["content"]))


def is_decision(request: Any) -> bool:
    """Whether a request the fake provider recorded is a decision call (native, or through Converse)."""
    if request.path.endswith("/converse"):
        asked = converse_asked(request.json)
        return isinstance(asked, dict) and "questions" in asked
    return request.path.endswith("/decisions")


def summarize_all_responder(latency_s: float = 0.0) -> Callable[[Any], Any]:
    """The answers of the fake provider of tests/fakes (``tests`` on the path) as :class:`FakeTransport` gives
    them: every fragment ``summarize``, every summary a short line, each after ``latency_s``; on the native
    ``decisions`` and OpenAI chat endpoints, and on Bedrock's Converse (decisions asked through chat)."""
    from fakes.provider_server import Reply, chat_reply, converse_reply, decision_reply

    def summaries(items: Any) -> str:
        return json.dumps({fid: f"ran step {fid}; exit 0; output elided" for fid in items})

    def answers(questions: Any) -> dict[str, Any]:
        return {name: {"type": "choice", "choice": "summarize", "confidence": 0.9} for name in questions}

    def answer(request: Any) -> Reply:
        body = request.json
        if request.path.endswith("/converse"):
            asked = converse_asked(body)
            if is_decision(request):
                return converse_reply(json.dumps({"answers": answers(asked["questions"])}), input_tokens=1000,
                                      output_tokens=20, delay_s=latency_s)
            return converse_reply(summaries(asked), input_tokens=1000, output_tokens=50, delay_s=latency_s)
        if request.path.endswith("/decisions"):
            return decision_reply(answers(body["questions"]), model=body["model"], input_tokens=1000,
                                  output_tokens=20, delay_s=latency_s)
        items = json.loads(body["messages"][-1]["content"])
        return chat_reply(summaries(items), model=body["model"], prompt_tokens=1000, completion_tokens=50,
                          delay_s=latency_s)

    return answer


def provider_main(certificate: str, key: str) -> None:
    """``--provider CERT KEY``: the fake provider of tests/fakes on 127.0.0.1 in this process (its ``decisions``
    and OpenAI chat endpoints) over HTTPS with that certificate, answering as :class:`FakeTransport` does; prints
    its base URL, serves until stdin closes. A process of its own, so that parsing the prompts (a real provider's
    work) is no part of the measured thread's CPU or of its process's interpreter lock."""
    import ssl

    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from fakes.provider_server import FakeProviderServer

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    provider = FakeProviderServer(ssl_context=context).start()
    provider.responder = summarize_all_responder()
    print(provider.base_url, flush=True)
    sys.stdin.read()
    provider.stop()


class RealProvider:
    """The ``--provider`` process, and routers whose offers reach it through the real ``decisions`` and
    ``openai`` transports (httpx, the pooled client of the event loop the requests run on), as a deployed
    function's calls go (no latency: only the CPU around the calls is the subject); and the API function's
    handler on a catalog of those offers (``COMPACTOR_CATALOG``)."""

    def __enter__(self) -> RealProvider:
        # HTTPS, as every provider is called: a test authority the transports trust (SSL_CERT_FILE, read by httpx
        # when the pooled client is made) and the provider's certificate signed by it. Until issue 11's
        # twenty-fourth round the provider answered plain HTTP: no record encrypted or decrypted in the calls.
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from cold_start import make_certificates

        self.environ = dict(os.environ)  # restored on exit: the files named below go with the directory
        self.directory = tempfile.TemporaryDirectory()
        certificate, key, authority = make_certificates(Path(self.directory.name))
        authority_file = Path(self.directory.name) / "authority.pem"
        authority_file.write_bytes(authority)
        os.environ.pop("SSL_CERT_DIR", None)
        os.environ["SSL_CERT_FILE"] = str(authority_file)
        self.process = subprocess.Popen([sys.executable, __file__, "--provider", str(certificate), str(key)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        base_url = self.process.stdout.readline().strip()  # type: ignore[union-attr]
        os.environ[PROVIDER_KEY_ENV] = "bench"
        common: dict[str, Any] = {"provider": "bench", "base_url": base_url, "api_key_env": PROVIDER_KEY_ENV,
                                  "observations": {"supports_json_mode": True}}
        self.offers = (
            Offer(id="bench/decider", family="decider", model="decider-1", protocol="decisions",
                  transport="decisions", price_in=0.5, price_out=2.0, **common),
            Offer(id="bench/summarizer", family="summarizer", model="summarizer-1", protocol="chat",
                  transport="openai", price_in=3.0, price_out=15.0, **common),
        )
        # One event loop for every request, as a container's (compactor.container.run_sync): the transports'
        # pooled client and its kept-alive connections are the container's, not each request's.
        self.loop = asyncio.new_event_loop()
        catalog = Path(self.directory.name) / "catalog.json"
        catalog.write_text(json.dumps(bench_catalog(SimpleNamespace(base_url=base_url), key_env=PROVIDER_KEY_ENV)))
        # The usage table (template.yaml's) on a moto server in a process of its own, answering at once: each billed
        # call's ledger entry is written through botocore (serialised, signed, sent, its answer parsed) as deployed.
        sys.path.insert(0, str(REPO_ROOT / "tests"))
        from fakes.slow_s3 import SlowS3

        self.aws = SlowS3(latency_ms=0)
        endpoint = self.aws.__enter__()
        # The API function's environment, tracing off: with X-Ray on and the invocation sampled, the SDK's httpx
        # patch makes concurrent calls fail (docs/performance.md, twenty-fourth round); unsampled it adds its own CPU.
        os.environ.update({"COMPACTOR_CATALOG": str(catalog), "POWERTOOLS_TRACE_DISABLED": "true",
                           "AWS_ENDPOINT_URL_DYNAMODB": endpoint, "COMPACTOR_USAGE_TABLE": USAGE_TABLE})
        for name in ("COMPACTOR_LEDGER_FILE", "COMPACTOR_IDEMPOTENCY_TABLE"):
            os.environ.pop(name, None)
        from compactor_aws import billing, ledger
        from compactor_cli.sam_template import load_template

        ledger.reset_client()
        billing.reset_backends()
        spec = load_template(REPO_ROOT / "template.yaml")["Resources"]["UsageTable"]["Properties"]
        ledger.dynamodb_client().create_table(TableName=USAGE_TABLE, **{name: spec[name] for name in (
            "BillingMode", "AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes") if name in spec})
        # The function's logs and metrics go to stdout, as on Lambda; here to /dev/null, bound at its import.
        self.sink = open(os.devnull, "w")  # noqa: SIM115
        sys.path.insert(0, str(REPO_ROOT / "functions" / "compact"))
        with contextlib.redirect_stdout(self.sink):
            import compact as api_function  # the handler module, its init as on Lambda
        self.handler = api_function.handler
        self.billed = 0
        return self

    def router(self) -> Router:
        return Router(self.offers, transport_for=transport_for)

    def run(self, body: str) -> tuple[float, dict[str, Any], float, float]:
        return self.loop.run_until_complete(run_compact(body, FakeTransport(), self.router()))

    def handle(self, body: str) -> tuple[float, dict[str, Any], float]:
        """The request through the API function's handler, on a new router (built before the clock, as
        :func:`run_compact`'s is): wall time, answer, thread CPU. The proxy event (API Gateway's work) is built
        before the clock; the runtime's encoding of the handler's result is timed with it."""
        from compactor import container, http_api
        from compactor_cli.lambda_runtime import LocalLambdaContext

        event = http_api.rest_proxy_event(method="POST", resource_path="/compact", query={},
                                          headers=[("Content-Type", http_api.JSON_CONTENT_TYPE)],
                                          body=body.encode("utf-8"))
        context = LocalLambdaContext("CompactFunction", timeout_s=60)
        container.reset_router()
        container.get_router()  # the container's router over its catalog, new for this run
        gc.collect()  # as for the round trip: each run starts from a collected heap
        with contextlib.redirect_stdout(self.sink):
            started, cpu_started = time.perf_counter(), time.thread_time()
            response = self.handler(event, context)
            sent = json.dumps(response)  # the Lambda runtime's encoding of the result it returns
            elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
        assert response["statusCode"] == 200 and sent, response
        self.billed += 1
        return elapsed, json.loads(response["body"]), cpu

    def ledger_entries(self) -> int:
        """The entries the usage table holds: one per billed request."""
        from compactor_aws import ledger

        pages = ledger.dynamodb_client().get_paginator("scan").paginate(
            TableName=USAGE_TABLE, FilterExpression="attribute_exists(entry_id)", Select="COUNT")
        return sum(page["Count"] for page in pages)

    def __exit__(self, *exc: object) -> None:
        from compactor import container
        from compactor_aws import billing, ledger

        container.reset_router()
        billing.reset_backends()
        ledger.reset_client()
        self.aws.__exit__()
        self.loop.close()
        self.sink.close()
        self.directory.cleanup()
        os.environ.clear()
        os.environ.update(self.environ)
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=30)


def check_compacted(answer: dict[str, Any]) -> int:
    """The request compacted every candidate as the provider answered (every fragment ``summarize``): no
    batch failed, none was left unsent, no fallback kept the original; the number of candidates. A run
    whose model calls failed is faster, and must not pass for one that made them."""
    report = answer["compaction"]
    candidates = [fragment for fragment in report["fragments"] if fragment["action"] != "keep"]
    assert answer["compacted"] and not report["reasons"], report["reasons"]
    assert candidates and all(fragment["action"] == "summarize" for fragment in candidates), \
        sorted({fragment["action"] for fragment in candidates})
    return len(candidates)


def source_file(i: int, variant: str = "") -> str:
    return f"src/module_{i % 17}{variant}/file_{i}.py"


def tool_unit(i: int, output_chars: int, reread: int | None = None, variant: str = "") -> list[dict[str, Any]]:
    """A test run whose output names one source file; with ``reread``, the command first reads the file
    an earlier unit's output named (as agents re-read what they saw). ``variant`` names other files."""
    call_id = f"call_{i}"
    line = f"{i:04d} {source_file(i, variant)}: ok "
    output = (line * (output_chars // len(line) + 1))[:output_chars]
    command = f"pytest -q tests/test_{i}.py"
    if reread is not None:
        command = f"cat {source_file(reread, variant)} && {command}"
    return [
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"command": command})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def transcript(fragments: int, output_chars: int, tail_chars: int = 0,
               instructions_chars: int = 400, reread_after: int = 0, variant: str = "") -> list[dict[str, Any]]:
    """System prompt, task, ``fragments`` tool-call units (the candidates), then, when ``tail_chars``,
    one more tool-call unit with that much output in the protected tail, and a final answer. With
    ``reread_after`` = k, unit i first re-reads the file unit i - k saw, so that the salience scan finds
    names used again later and each batch's ``later`` block quotes the actions that touch them (real
    transcripts have both; docs/offline-offers.md). Another ``variant`` is another session of the same
    shape: its files have other names, so its summary prompts (and its flow) differ."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " + "Follow the repository rules. " * (
            instructions_chars // 28)},
        {"role": "user", "content": "Make the test suite pass."},
    ]
    for i in range(fragments):
        messages.extend(tool_unit(i, output_chars, i - reread_after if reread_after and i >= reread_after else None,
                                  variant))
    if tail_chars:
        messages.extend(tool_unit(fragments, tail_chars))
    messages.append({"role": "assistant", "content": "All tests pass now; summarising the changes."})
    return messages


def request_body(messages: list[dict[str, Any]], keep_recent: int = 1) -> str:
    return json.dumps({"messages": messages, "keep_recent": keep_recent, "target_ratio": 0.1,
                       "decision_policy_ir": DEFAULT_DECISIONS_POLICY}, separators=(",", ":"))


async def run_compact(body: str, transport: FakeTransport, router: Router | None = None
                      ) -> tuple[float, dict[str, Any], float, float]:
    """Wall time of the request on ``body`` (parsed and validated as the API function's route receives it, compacted by
    ``service.compact``, its answer encoded), its answer, the thread's CPU time in it, and the thread's CPU
    time in ``service.compact`` alone; a new router (a container's first request: nothing the router keeps is
    warm) unless ``router`` is given."""
    router = router or router_for(transport)
    gc.collect()  # as for the round trip: each run starts from a collected heap
    started, cpu_started = time.perf_counter(), time.thread_time()
    request = CompactRequest.model_validate(bounded_loads(body))  # what the API's validation hands the route
    service_started = time.thread_time()
    status, answer = await compact(request, deadline=Deadline.after_ms(40_000), router=router)
    service_cpu = time.thread_time() - service_started
    text = dense_dumps(answer)  # the answer's body, as the API function writes it
    elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
    assert status == 200 and text, answer
    return elapsed, answer, cpu, service_cpu


def round_trip_s(body: str, repeats: int = 15, clock: Any = time.perf_counter) -> float:
    """Median of ``repeats`` round trips, each from a collected heap: a full collection of the previous
    round trip's 900 KB of objects inside a sample made about every other one 3× slower when the
    process held nothing else, and a median of five such samples could halve the ratio."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        started = clock()
        json.dumps(json.loads(body))
        samples.append(clock() - started)
    return statistics.median(samples)


def overhead_body(variant: str = "") -> str:
    # 128 candidates with every one of them in a batch (tool outputs of 4 200 characters: 12 batches, eleven
    # of 11 and one of 7, a flow input of about 820 000 bytes), plus a 332 KB tool output in the protected tail (it reaches the
    # flow only as a 1 000-character excerpt): about 900 KB in all. Each unit re-reads the file the unit
    # 8 places earlier saw: names used later and later actions to quote, as in a real transcript.
    return request_body(transcript(128, FRAGMENT_OUTPUT_CHARS, tail_chars=TAIL_OUTPUT_CHARS,
                                   reread_after=REREAD_AFTER, variant=variant), keep_recent=3)


def overhead(runs: int, profile: bool) -> bool:
    """The goal is on runs 2..N of this process, each a new session (a transcript of the same shape whose
    files have other names) on a new router: what the router keeps (admitted policies, rankings and flows)
    is cold, what the process keeps (imports, the preset, the salience scan's verdicts on the runs it has
    seen) is warm, as in a container whose every request is a new transcript; the same body again would
    find its own names judged already. Three more lines follow: other sessions of the same shape on one
    warm router (each flow is admitted anew), the same request again (its flow comes from the router's
    admission cache, docs/performance.md), and a new process's first request after its imports."""
    body = overhead_body()
    sessions = [overhead_body(f"_s{run}") for run in range(runs)]  # built before any run is timed
    # The goal's runs get sessions of their own: a session the process has compacted once has its names judged.
    handler_sessions = [overhead_body(f"_h{run}") for run in range(runs)]
    with RealProvider() as provider:
        asyncio.run(run_compact(body, FakeTransport()))  # run 1: the process's first use of the path, not counted
        check_compacted(provider.run(body)[1])  # and of the transports (httpx's import, the pooled client)
        check_compacted(provider.handle(body)[1])  # and of the handler (its routes' lazy imports, its event loop)
        # The baseline is timed beside each run, not once before them: this machine's speed drifts within a
        # run of the benchmark (the same code's runs moved between 31 and 45 ms in one), and a baseline timed
        # only at the start divides the runs' time by a speed of another moment.
        baselines, cpu_baselines, samples, cpu_samples, service_samples = [], [], [], [], []
        real_samples, real_cpu_samples, handler_samples, handler_cpu_samples = [], [], [], []
        answer, transport = {}, FakeTransport()
        for session, handler_session in zip(sessions, handler_sessions):
            baselines.append(round_trip_s(handler_session, repeats=3))
            cpu_baselines.append(round_trip_s(handler_session, repeats=3, clock=time.thread_time))
            elapsed, handler_answer, cpu = provider.handle(handler_session)
            check_compacted(handler_answer)
            handler_samples.append(elapsed)
            handler_cpu_samples.append(cpu)
            elapsed, real_answer, cpu, _ = provider.run(session)
            check_compacted(real_answer)
            real_samples.append(elapsed)
            real_cpu_samples.append(cpu)
            transport = FakeTransport()
            elapsed, answer, cpu, service_cpu = asyncio.run(run_compact(session, transport))
            check_compacted(answer)
            assert transport.decisions == transport.chats >= 12, (transport.decisions, transport.chats)
            assert real_answer["messages"] == answer["messages"]  # the same compaction either way
            samples.append(elapsed)
            cpu_samples.append(cpu)
            service_samples.append(service_cpu)
        assert provider.ledger_entries() == provider.billed, "a request through the handler was not billed"
    baseline, cpu_baseline = statistics.median(baselines), statistics.median(cpu_baselines)
    report = answer["compaction"]
    candidates = check_compacted(answer)
    print(f"compact_overhead: requests of {len(sessions[-1]) / 1000:.0f} KB, {candidates} candidate fragments, "
          f"{transport.decisions} batches, reasons {report['reasons'] or 'none'}, "
          f"{report['original_bytes']} → {report['output_bytes']} bytes (target met: {report['target_met']})")
    print(f"  json.loads+dumps round trip of the body: {baseline * 1000:.1f} ms, thread CPU "
          f"{cpu_baseline * 1000:.1f} ms (medians over the runs of three beside each)")
    # The goal's figure: the thread's CPU time for the whole request as the API function answers it, through the
    # real transports (encoding each model call's body, httpx sending it and reading the answer). Thread CPU, not
    # wall: the wall time also holds the provider's own work in its process, and other processes' load on a
    # shared machine inflates wall time far more.
    handler_cpu = statistics.median(handler_cpu_samples)
    cpu_ratio = handler_cpu / cpu_baseline
    met = cpu_ratio <= OVERHEAD_GOAL
    print(f"  the request through the API function's handler and the real decisions/openai transports (the proxy "
          f"event admitted, Powertools' resolver and validation, service.compact with its {2 * transport.decisions} "
          f"model calls encoded, sent and read over loopback HTTPS, billing, the proxy response encoded): thread CPU "
          f"median {handler_cpu * 1000:.1f} ms (min {min(handler_cpu_samples) * 1000:.1f}, n={runs}), ratio "
          f"{cpu_ratio:.1f} (goal ≤ {OVERHEAD_GOAL:g})  {'OK' if met else 'ABOVE GOAL'}")
    handler_wall = statistics.median(handler_samples)
    print(f"  its wall time: median {handler_wall * 1000:.1f} ms, ratio {handler_wall / baseline:.1f} (not the goal's "
          f"figure: it holds the provider's own work)")
    real_cpu = statistics.median(real_cpu_samples)
    print(f"  without the handler (bounded_loads, CompactRequest, service.compact through the real transports, "
          f"dense_dumps; until issue 11's twenty-fourth round the goal's figure): thread CPU median "
          f"{real_cpu * 1000:.1f} ms, ratio {real_cpu / cpu_baseline:.1f}; paired difference with the handler "
          f"{statistics.median(h - r for h, r in zip(handler_cpu_samples, real_cpu_samples)) * 1000:+.1f} ms")
    median, cpu_median = statistics.median(samples), statistics.median(cpu_samples)
    print(f"  the same request with in-process fake transports (the core path without the calls' encoding and "
          f"HTTP; until issue 11's fourteenth round the goal's figure): median {median * 1000:.1f} ms, ratio "
          f"{median / baseline:.1f}; thread CPU {cpu_median * 1000:.1f} ms, ratio {cpu_median / cpu_baseline:.1f}")
    service_median = statistics.median(service_samples)
    print(f"  thread CPU time of service.compact alone (fake transports): median {service_median * 1000:.1f} ms, "
          f"ratio {service_median / cpu_baseline:.1f} (not the goal's figure)")
    warm_router = router_for(transport)
    bodies = [overhead_body(f"_{run}") for run in range(runs + 1)]
    asyncio.run(run_compact(bodies[-1], transport, warm_router))  # the router's first request
    other = [asyncio.run(run_compact(other_body, transport, warm_router)) for other_body in bodies[:runs]]
    asyncio.run(run_compact(body, transport, warm_router))
    again = [asyncio.run(run_compact(body, transport, warm_router)) for _ in range(runs)]
    admissions = warm_router.flow_admissions
    assert admissions.hits == runs and admissions.misses == runs + 2, (admissions.hits, admissions.misses)
    for label, measured in (("warm router, other sessions", other), ("warm router, the same request again", again)):
        wall, cpu = statistics.median(m[0] for m in measured), statistics.median(m[2] for m in measured)
        print(f"  {label}: median {wall * 1000:.1f} ms, ratio {wall / baseline:.1f}; thread CPU "
              f"{cpu * 1000:.1f} ms, ratio {cpu / cpu_baseline:.1f} (not the goal's figure)")
    first = [json.loads(subprocess.run([sys.executable, __file__, "--first-request"], check=True,
                                       capture_output=True, text=True).stdout) for _ in range(FIRST_REQUESTS)]
    wall, cpu = statistics.median(f["wall"] for f in first), statistics.median(f["cpu"] for f in first)
    print(f"  a new process's first request (its imports done): median {wall * 1000:.1f} ms, ratio "
          f"{wall / baseline:.1f}; thread CPU {cpu * 1000:.1f} ms, ratio {cpu / cpu_baseline:.1f} "
          f"(n={FIRST_REQUESTS}; not the goal's figure)")
    if profile or not met:
        print_profile(body)
    return met


def first_request() -> None:
    """In a new process: the first ``service.compact`` after this module's imports, as JSON on stdout."""
    body = overhead_body()
    round_trip_s(body, repeats=1)
    elapsed, _, cpu, _ = asyncio.run(run_compact(body, FakeTransport()))
    print(json.dumps({"wall": elapsed, "cpu": cpu}))


# Stages of decision-mode compaction, by (module suffix, function name), for the cumulative breakdown.
STAGES = (
    ("compaction/preparation.py", "prepare"), ("compaction/preparation.py", "_admissible"),
    ("compaction/preset.py", "materialise"), ("flow/admit.py", "admit_flow"), ("identity.py", "fingerprint"),
    ("flow/scheduler.py", "run_flow"), ("compaction/reassembly.py", "reassemble"),
    ("compaction/reassembly.py", "compaction_report"), ("jsonutil.py", "dense_size"),
    ("jsonutil.py", "ascii_dumps"), ("jsonutil.py", "dense_dumps"), ("jsonutil.py", "ascii_wire_size"),
)


def print_profile(body: str) -> None:
    """cProfile of one run: time per stage (cumulative) and the top functions by own time."""
    asyncio.run(run_compact(body, FakeTransport()))  # warm
    profiler = cProfile.Profile()
    request, router = CompactRequest.model_validate_json(body), router_for(FakeTransport())

    async def profiled() -> None:  # service.compact alone: not the parse, the router or the collection before it
        profiler.enable()
        try:
            status, answer = await compact(request, deadline=Deadline.after_ms(40_000), router=router)
        finally:
            profiler.disable()
        assert status == 200, answer

    gc.collect()
    asyncio.run(profiled())
    stats = pstats.Stats(profiler)
    total = max(entry[3] for entry in stats.stats.values())  # type: ignore[attr-defined]
    print(f"  cProfile of one run ({total * 1000:.1f} ms under the profiler), cumulative per stage:")
    for suffix, name in STAGES:
        for (path, _line, function), (_cc, calls, _tt, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            if function == name and path.endswith(suffix):
                label = f"{suffix}:{name}"
                print(f"    {label:45s} {calls:5d} calls {cumulative * 1000:7.1f} ms ({cumulative / total:4.0%})")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(10)
    print("  top 10 by own time:")
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    print("\n".join("    " + line.replace(str(REPO_ROOT) + "/", "") for line in lines[start:] if line.strip()))


def concurrency(latency_s: float, runs: int) -> bool:
    """One request of single-fragment batches (as many as the flow input admits, at least MIN_BATCHES):
    each batch is a decision then a summary, so the critical path is 2·L whatever their number."""
    body = request_body(transcript(BATCHES, BATCH_OUTPUT_CHARS))
    ratios, batches = [], 0
    for _ in range(runs):
        transport = FakeTransport(latency_s)
        elapsed, answer, _, _ = asyncio.run(run_compact(body, transport))
        batches = transport.decisions
        assert batches >= MIN_BATCHES and transport.chats == batches, (transport.decisions, transport.chats)
        assert answer["compacted"]
        ratios.append(elapsed / (2 * latency_s))
    median = statistics.median(ratios)
    print(f"compact_concurrency: {batches} batches ({batches} decisions + {batches} summaries), "
          f"provider latency L = {latency_s * 1000:.0f} ms, request {len(body) / 1000:.0f} KB")
    print(f"  wall / (2·L): median {median:.3f}, best {min(ratios):.3f} (n={runs}; goal ≤ {CONCURRENCY_GOAL}; "
          f"sequential ≈ {batches})  {'OK' if median <= CONCURRENCY_GOAL else 'ABOVE GOAL'}")
    return median <= CONCURRENCY_GOAL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--profile", action="store_true", help="always print the cProfile hotspots")
    parser.add_argument("--first-request", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--provider", nargs=2, metavar=("CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_request:
        first_request()
        return 0
    if args.provider:
        provider_main(*args.provider)
        return 0
    ok = overhead(args.runs, args.profile)
    ok &= concurrency(args.latency_ms / 1000, max(3, args.runs // 2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
