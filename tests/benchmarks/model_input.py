"""Model input per compaction: the bytes Compactor sends to model providers, against the transcript's own
size. Run: ``.venv/bin/python tests/benchmarks/model_input.py [FILE|DIR ...]`` (default: the corpus).

Paid providers bill every input token, so this is what a compaction costs. Each transcript is compacted
in decision mode (default settings) and in seal mode through the real ``decisions`` and ``openai``
transports against a recording provider on 127.0.0.1, which answers with the built-in offline decider
and summarizer, so the choices (and the summary calls they lead to) are the ones ``make demo`` makes.

Printed per transcript: the transcript's dense JSON bytes, the request bytes sent in decision mode
(decisions + summaries) and their ratio to the transcript, the model calls, the bytes of seal mode's
single summary call, and the *shared prefix*: the bytes every decision request of the compaction starts
with, as a share of the mean decision request (what a provider's prompt cache can reuse across a
request's batches), and the decision input *as billed with prompt caching*, as the requests were sent: the
provider answers after ``LATENCY_S``, and a request pays at ``CACHED_INPUT_PRICE_FACTOR`` of the input price
(compactor/cost.py) the longest prefix it shares with a request of its kind (decisions, summaries) answered
before it arrived, when that prefix is long enough to be cached at all (``CACHE_MIN_BYTES``); no cache-write
surcharge. A provider that caches prefixes on its own (the ``decisions`` and ``openai`` transports mark nothing)
can serve a prefix only once it has processed a request holding it, so a request's batches, which leave
together, all miss. Until issue 11's twenty-fourth round this figure assumed every request after the first of
its kind read their common prefix, as if the first had filled the cache before the others were sent; that
bound is printed after it (docs/performance.md). The raw bytes stay the headline figure. Also printed: the
*shared state* of the decision requests, the bytes of the ``state`` fields every decision request of the
compaction carries unchanged, wherever the request puts them.

Goals: mean decision-mode ratio <= 1.5 over the transcripts where decision mode made calls (aim: <= 1,
never above the seal's one call); the worst transcript's ratio is printed beside the mean. And the batch
prompts share one cacheable prefix: a transcript whose decision requests (two or more) share at least
``CACHE_MIN_BYTES`` of state must send all of it as their common prefix (prefix >= shared state), else
its row says ``NOT PREFIX``. Exit 1 when either goal is missed.

``--screenshots``: the same figures for transcripts of a computer-use agent, one per format: three corpus
transcripts (a Claude Code session as ``anthropic-messages``, a Codex rollout as ``openai-responses``, a tool-calling
chat trajectory) with a PNG screenshot of 50-200 KB (incompressible bytes behind a PNG signature, in base64) added to
each tool result, where each format puts an image (an ``image`` block in the ``tool_result``, an ``input_image``
part in the ``function_call_output``, an ``image_url`` part in the ``tool`` message). Besides the columns above it
prints the base64 bytes the model requests carry (``base64 sent``), the units left out of every batch by a size
limit (``unsent``), and the output's size as a share of the transcript (``kept``): the models' view shows each
screenshot as ``[image/png, N bytes]`` (docs/formats.md "Images and files"). The goals above are not judged there.
``--screenshot-bytes LOW-HIGH`` sets the screenshots' sizes (small JPEG-like ones: ``5000-30000``). ``--in-calls``
puts each screenshot in a tool call's arguments instead, as an agent saving it through a tool sends it: after each tool
result, a ``write_file`` call whose ``content`` is the screenshot's bare base64 (``encoding: base64``), and its short
answer.

A directory is read with its subfolders (the corpus keeps its Claude Code and Codex sessions in
``anthropic-messages/`` and ``openai-responses/``). Transcripts are read as chat, as ``compactor eval``
reads them (a Claude Code session converted to chat messages); a Codex rollout, which has no chat
messages, is compacted in its own format (``openai-responses``), as ``compactor compact`` sends it. A Claude Code
session is also measured as ``compactor compact`` sends it, in its own format (``anthropic-messages``): one line
after the means, not in them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from compactor.budget import Deadline
from compactor.cost import CACHED_INPUT_PRICE_FACTOR
from compactor.jsonutil import dense_size
from compactor.models import CompactRequest
from compactor.offline.decider import DECIDER_MODEL
from compactor.offline.summarizer import SUMMARIZER_MODEL
from compactor.offline.transport import BuiltinTransport
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from compactor.providers.base import ChatRequest, DecisionRequest, Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from compactor.service import compact
from compactor.transcripts import CLAUDE_CODE, CODEX, TranscriptError, parse_transcript, read_transcript

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "corpus"
GOAL = 1.5
KEY_ENV = "COMPACTOR_BENCH_KEY"
# The shortest prefix providers cache: 1024 tokens (OpenAI; Anthropic's larger models), at 4 bytes a token.
CACHE_MIN_BYTES = 4096
# The provider's latency in the table's runs: a request's batches leave together and each waits this long for its
# answer, so which requests could read a prefix another wrote follows from when they were sent.
LATENCY_S = 0.25
_OFFLINE = BuiltinTransport()
_DECIDER = Offer(id="o/d", provider="o", family="d", model=DECIDER_MODEL, protocol="decisions", transport="builtin")
_SUMMARIZER = Offer(id="o/s", provider="o", family="s", model=SUMMARIZER_MODEL, protocol="chat", transport="builtin")


class Sent(NamedTuple):
    """One request as the provider saw it: when it arrived, when its answer left, its body."""

    arrived: float
    answered: float
    body: bytes


def recording_provider(latency_s: float = 0.0) -> FakeProviderServer:
    """Native decisions and OpenAI chat on 127.0.0.1 (tests/fakes), answered by the built-in offline offers after
    ``latency_s``; it records every request, and in ``provider.timed`` (by kind: ``decisions``, ``chat``) when
    each arrived and when its answer left."""
    timed: dict[str, list[Sent]] = {"decisions": [], "chat": []}
    lock = threading.Lock()

    def answer(request: RecordedRequest) -> Reply:
        arrived = time.monotonic()
        body = request.json
        if request.path.endswith("/decisions"):
            decided = asyncio.run(_OFFLINE.decide(_DECIDER, DecisionRequest(body["state"], body["questions"]), 30))
            reply = Reply(200, {"model": body["model"], "answers": decided.answers, "usage": decided.usage})
        else:
            reply = summary_reply(body)
        reply.delay_s = latency_s
        with lock:
            timed["decisions" if request.path.endswith("/decisions") else "chat"].append(
                Sent(arrived, time.monotonic() + latency_s, request.body))
        return reply

    provider = FakeProviderServer().start()
    provider.responder = answer
    provider.timed = timed  # type: ignore[attr-defined]
    return provider


def summary_reply(body: dict[str, Any]) -> Reply:
    """The built-in offline summarizer's answer to an OpenAI chat request ``body``, as the provider sends it."""
    json_mode = (body.get("response_format") or {}).get("type") == "json_object"
    chat = asyncio.run(_OFFLINE.chat(_SUMMARIZER, ChatRequest(body["messages"], body.get("max_tokens"), json_mode), 30))
    return chat_reply(chat.text, finish_reason=chat.finish_reason or "stop", model=body["model"],
                      prompt_tokens=chat.tokens_in, completion_tokens=chat.tokens_out)


def failed_calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The flow nodes of a compaction's answer ``body`` whose call failed: a failed call was not answered (and maybe
    not recorded), so figures with any would flatter."""
    return [node for node in body.get("x_router", {}).get("decision_trace", {}).get("flow_nodes", [])
            if node.get("error")]


def sent(provider: FakeProviderServer, kind: str | None = None) -> list[bytes]:
    """The request bodies the provider received, all or of one kind (``decisions``, ``chat``)."""
    return [request.body for request in provider.requests
            if kind is None or request.path.endswith("/decisions") == (kind == "decisions")]


def router(base_url: str) -> Router:
    common = {"provider": "bench", "base_url": base_url, "api_key_env": KEY_ENV, "price_in": 1.0, "price_out": 1.0,
              "observations": {"supports_json_mode": True, "context": 10_000_000}}
    offers = (Offer(id="bench/decider", family="d", model=DECIDER_MODEL, protocol="decisions",
                    transport="decisions", **common),
              Offer(id="bench/summarizer", family="s", model=SUMMARIZER_MODEL, protocol="chat",
                    transport="openai", **common))
    return Router(offers, transport_for=transport_for)


def shared_prefix(bodies: list[bytes]) -> int:
    if len(bodies) < 2:
        return 0
    return len(os.path.commonprefix(bodies))


def shared_state(bodies: list[bytes]) -> int:
    """Bytes of the ``state`` fields that every one of these decision requests carries unchanged, each as
    ``"key":value,`` in dense JSON: what one identical prefix could hold whatever the layout (0 for fewer
    than two requests)."""
    if len(bodies) < 2:
        return 0
    states = [json.loads(body)["state"] for body in bodies]
    return sum(dense_size({key: value}) - 1 for key, value in states[0].items()
               if all(key in state and state[key] == value for state in states[1:]))


def cache_billed(bodies: list[bytes]) -> float:
    """Input bytes of related requests as billed with prompt caching: the first in full, each later one's
    share of the common prefix at the cached-input price (nothing cached below ``CACHE_MIN_BYTES``)."""
    prefix = shared_prefix(bodies)
    if prefix < CACHE_MIN_BYTES:
        return float(sum(map(len, bodies)))
    return sum(map(len, bodies)) - (len(bodies) - 1) * prefix * (1 - CACHED_INPUT_PRICE_FACTOR)


def cache_billed_as_sent(sent_requests: list[Sent]) -> float:
    """Input bytes of related requests as billed with prompt caching, as they were sent: a request reads at the
    cached-input price the longest prefix it shares with a request answered before it arrived (a provider caches a
    prefix once it has processed it: requests sent together all miss), when that prefix is at least
    ``CACHE_MIN_BYTES``; the rest in full."""
    billed = 0.0
    for request in sent_requests:
        prefix = max((len(os.path.commonprefix([earlier.body, request.body])) for earlier in sent_requests
                      if earlier.answered <= request.arrived), default=0)
        cached = prefix if prefix >= CACHE_MIN_BYTES else 0
        billed += len(request.body) - cached * (1 - CACHED_INPUT_PRICE_FACTOR)
    return billed


def read(path: Path, own: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The request fields of a transcript and its items: chat messages when it reads as chat, else a Codex
    rollout's own items (``openai-responses``); with ``own``, a session's items in its own format whatever it
    reads as. Raises ``TranscriptError`` for anything else."""
    text = path.read_text(encoding="utf-8")
    if own:
        transcript = read_transcript(text)
        return {**transcript.fields, "format": transcript.format, transcript.items_field: transcript.items}, \
            transcript.items
    try:
        messages, fields = parse_transcript(text)
        return {**fields, "messages": messages}, messages
    except TranscriptError:
        transcript = read_transcript(text)
        if transcript.session != CODEX:
            raise
        return {**transcript.fields, "format": transcript.format, transcript.items_field: transcript.items}, \
            transcript.items


SCREENSHOT_SOURCES = (
    "anthropic-messages/claude-code-2.1.179_claude-opus-4-8_git-sync_omitted-thinking.jsonl",
    "openai-responses/codex-desktop-0.133.0_gpt-5.5_entire-graph_resumed.jsonl",
    "msa-v2-toolcalls_deepseek-chat_pydicom-901.json",
)
SCREENSHOT_BYTES = (50_000, 200_000)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def screenshot(rng: random.Random, sizes: tuple[int, int] = SCREENSHOT_BYTES) -> str:
    """A screenshot's base64: a PNG signature and incompressible bytes (PNG data is compressed), of ``sizes``."""
    size = rng.randint(*sizes)
    return base64.b64encode(PNG_SIGNATURE + rng.randbytes(size - len(PNG_SIGNATURE))).decode("ascii")


def with_screenshot(item: dict[str, Any], format: str, rng: random.Random,
                    sizes: tuple[int, int] = SCREENSHOT_BYTES) -> dict[str, Any]:
    """``item`` with a screenshot added to each tool result it carries, in its format's shape (a copy)."""
    def text_of(content: Any, part: str) -> list[Any]:
        return list(content) if isinstance(content, list) else [{"type": part, "text": content or ""}]

    if format == "anthropic-messages":
        content = item.get("content")
        if not isinstance(content, list) or not any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                    for b in content):
            return item
        def image() -> dict[str, Any]:
            return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                "data": screenshot(rng, sizes)}}

        return {**item, "content": [{**b, "content": text_of(b.get("content"), "text") + [image()]}
                                    if isinstance(b, dict) and b.get("type") == "tool_result" else b
                                    for b in content]}
    if format == "openai-responses":
        if item.get("type") not in ("function_call_output", "custom_tool_call_output"):
            return item
        return {**item, "output": text_of(item.get("output"), "input_text") + [
            {"type": "input_image", "image_url": "data:image/png;base64," + screenshot(rng, sizes)}]}
    if item.get("role") != "tool":
        return item
    return {**item, "content": text_of(item.get("content"), "text") + [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + screenshot(rng, sizes)}}]}


def saving_call(n: int, format: str, data: str) -> list[dict[str, Any]]:
    """A call saving screenshot ``n`` through a tool, its base64 (bare, as a ``write_file`` tool with a base64
    encoding takes a binary file) in the call's arguments, and the tool's short answer, in ``format``'s shape."""
    call_id, name, answer = f"call_save_{n}", "write_file", f"wrote screens/shot_{n}.png"
    arguments = {"path": f"screens/shot_{n}.png", "encoding": "base64", "content": data}
    if format == "anthropic-messages":
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name,
                                                   "input": arguments}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": answer}]}]
    if format == "openai-responses":
        return [{"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)},
                {"type": "function_call_output", "call_id": call_id, "output": answer}]
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": name, "arguments": json.dumps(arguments)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": answer}]


def is_result(item: dict[str, Any], format: str) -> bool:
    if format == "anthropic-messages":
        content = item.get("content")
        return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                 for b in content)
    if format == "openai-responses":
        return item.get("type") in ("function_call_output", "custom_tool_call_output")
    return item.get("role") == "tool"


def with_saving_calls(items: list[dict[str, Any]], format: str, rng: random.Random,
                      sizes: tuple[int, int] = SCREENSHOT_BYTES) -> list[dict[str, Any]]:
    """``items`` with a call saving a screenshot of ``sizes`` (:func:`saving_call`) after each tool result (the last
    of consecutive results, so that no call is parted from its results)."""
    out: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        out.append(item)
        following = items[index + 1] if index + 1 < len(items) else None
        if is_result(item, format) and (format == "anthropic-messages" or following is None
                                        or not is_result(following, format)):
            out += saving_call(index, format, screenshot(rng, sizes))
    return out


def read_with_screenshots(path: Path, sizes: tuple[int, int] = SCREENSHOT_BYTES, in_calls: bool = False
                          ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The transcript in its own format (a Claude Code session as ``anthropic-messages``, not converted to chat),
    a screenshot of ``sizes`` bytes added to each tool result (the same bytes on every run); ``in_calls``: in a call
    saving it after each tool result instead (:func:`with_saving_calls`)."""
    transcript = read_transcript(path.read_text(encoding="utf-8"))
    rng = random.Random(path.name)
    if in_calls:
        items = with_saving_calls(transcript.items, transcript.format, rng, sizes)
    else:
        items = [with_screenshot(item, transcript.format, rng, sizes) for item in transcript.items]
    return {**transcript.fields, "format": transcript.format, transcript.items_field: items}, items


BASE64_RUN = re.compile(rb"[A-Za-z0-9+/=]{200,}")


def base64_sent(bodies: list[bytes]) -> int:
    """Bytes of base64 the requests carry: every run of 200 or more base64 characters (a JSON string escapes none of
    them, so a screenshot's base64 stays one run, excerpted or not; a text's words and paths make no such run)."""
    return sum(len(run) for body in bodies for run in BASE64_RUN.findall(body))


def measure(path: Path, provider: FakeProviderServer, screenshots: tuple[int, int] | None = None,
            own: bool = False, in_calls: bool = False) -> dict[str, Any]:
    fields, items = read_with_screenshots(path, screenshots, in_calls) if screenshots else read(path, own)
    size = dense_size(items)
    result: dict[str, Any] = {"name": path.name, "bytes": size, "format": fields.get("format", "openai-chat")}
    for mode, extra in (("decision", {"decision_policy_ir": DEFAULT_DECISIONS_POLICY}), ("seal", {})):
        provider.requests.clear()
        for kind in provider.timed.values():  # type: ignore[attr-defined]
            kind.clear()
        request = CompactRequest.model_validate({**fields, **extra})
        status, body = asyncio.run(compact(request, deadline=Deadline.after_ms(120_000), router=router(provider.base_url)))
        if status != 200:
            raise SystemExit(f"{path.name} ({mode}): {status} {body}")
        if failed := failed_calls(body):
            raise SystemExit(f"{path.name} ({mode}): model calls failed: {failed}")
        every = sent(provider)
        result[mode] = {"sent": sum(map(len, every)), "calls": len(every),
                        "billed": sum(cache_billed_as_sent(provider.timed[kind])  # type: ignore[attr-defined]
                                      for kind in ("decisions", "chat")),
                        "bound": sum(cache_billed(sent(provider, kind)) for kind in ("decisions", "chat"))}
        if screenshots:
            output = body["input" if "input" in body else "messages"]
            fragments = body.get("compaction", {}).get("fragments", [])  # decision mode's report
            result[mode].update(base64=base64_sent(every), kept=dense_size(output) / size,
                                unsent=sum(1 for f in fragments if f.get("reason") == "not_sent"))
        if mode == "decision":
            decisions = sent(provider, "decisions")
            mean = statistics.mean(map(len, decisions)) if decisions else 0
            result[mode]["prefix"] = shared_prefix(decisions) / mean if mean and len(decisions) > 1 else None
            result[mode]["prefix_bytes"] = shared_prefix(decisions)
            result[mode]["shared"] = shared_state(decisions)
    return result


def transcripts(arguments: list[str]) -> list[Path]:
    paths = [Path(a) for a in arguments] or [CORPUS]
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(p for p in path.rglob("*.json*") if p.is_file()) if path.is_dir() else [path])
    return found


def claude_code_session(path: Path) -> bool:
    """Whether ``path`` is a Claude Code session, which the table reads as chat and ``compactor compact`` sends
    in its own format (``anthropic-messages``)."""
    try:
        return read_transcript(path.read_text(encoding="utf-8")).session == CLAUDE_CODE
    except TranscriptError:
        return False


def readable(path: Path) -> bool:
    try:
        read(path)
    except TranscriptError as exc:
        print(f"{path.name}: skipped: {exc}")
        return False
    return True


def prefix_missed(row: dict[str, Any]) -> bool:
    """The batch prompts' goal: decision requests sharing at least ``CACHE_MIN_BYTES`` of state send all
    of it as their common prefix."""
    d = row["decision"]
    return d["shared"] >= CACHE_MIN_BYTES and d["prefix_bytes"] < d["shared"]


def screenshot_figures(paths: list[Path], sizes: tuple[int, int], in_calls: bool = False) -> int:
    """``--screenshots``: each transcript with its screenshots, compacted in decision and seal mode; figures only."""
    provider = recording_provider()
    try:
        print(f"screenshots of {sizes[0]}-{sizes[1]} bytes "
              + ("in a call's arguments after each tool result" if in_calls else "in each tool result"))
        print(f"{'transcript (with screenshots)':<52} {'format':<18} {'bytes':>9} {'mode':<8} {'sent':>9} "
              f"{'ratio':>6} {'calls':>5} {'base64 sent':>11} {'unsent':>6} {'kept':>6}")
        for path in paths:
            row = measure(path, provider, screenshots=sizes, in_calls=in_calls)
            for mode in ("decision", "seal"):
                m = row[mode]
                print(f"{row['name'][:52]:<52} {row['format']:<18} {row['bytes']:9d} {mode:<8} {m['sent']:9d} "
                      f"{m['sent'] / row['bytes']:6.3f} {m['calls']:5d} {m['base64']:11d} {m['unsent']:6d} "
                      f"{m['kept']:6.1%}")
    finally:
        provider.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--screenshots", action="store_true",
                        help="a computer-use agent's transcripts: corpus transcripts with a screenshot in each tool "
                             "result (default: the three of SCREENSHOT_SOURCES)")
    parser.add_argument("--screenshot-bytes", default=f"{SCREENSHOT_BYTES[0]}-{SCREENSHOT_BYTES[1]}",
                        help="the screenshots' sizes, LOW-HIGH (default %(default)s)")
    parser.add_argument("--in-calls", action="store_true",
                        help="with --screenshots: each screenshot in the arguments of a call saving it (a write_file "
                             "tool taking base64), one after each tool result, instead of in the result")
    args = parser.parse_args()
    os.environ.setdefault(KEY_ENV, "bench-key")
    if args.screenshots:
        low, _, high = args.screenshot_bytes.partition("-")
        return screenshot_figures([Path(a) for a in args.paths] or [CORPUS / name for name in SCREENSHOT_SOURCES],
                                  (int(low), int(high or low)), args.in_calls)
    provider = recording_provider(LATENCY_S)
    rows, sessions = [], []
    try:
        print(f"{'transcript':<52} {'bytes':>8} {'decision sent':>13} {'ratio':>6} {'calls':>5} "
              f"{'prefix':>6} {'shared':>6} {'cached-billed':>13} {'ratio':>6} {'seal sent':>9} {'ratio':>6}")
        for path in filter(readable, transcripts(args.paths)):
            row = measure(path, provider)
            rows.append(row)
            d, s = row["decision"], row["seal"]
            prefix = f"{d['prefix']:.0%}" if d["prefix"] is not None else "-"
            print(f"{row['name'][:52]:<52} {row['bytes']:8d} {d['sent']:13d} {d['sent'] / row['bytes']:6.2f} "
                  f"{d['calls']:5d} {prefix:>6} {d['shared']:6d} {d['billed']:13.0f} {d['billed'] / row['bytes']:6.2f} "
                  f"{s['sent']:9d} {s['sent'] / row['bytes']:6.2f}"
                  + (f"  NOT PREFIX: common prefix {d['prefix_bytes']} bytes" if prefix_missed(row) else ""))
            if claude_code_session(path):
                sessions.append(measure(path, provider, own=True))
    finally:
        provider.stop()
    # Transcripts where decision mode made no call cost nothing: averaging them in would flatter the figure.
    called = [r for r in rows if r["decision"]["calls"]]
    if not called:
        print("decision mode made no model call on any transcript: nothing to measure")
        return 1
    mean_decision = statistics.mean(r["decision"]["sent"] / r["bytes"] for r in called)
    worst = max(called, key=lambda r: r["decision"]["sent"] / r["bytes"])
    mean_billed = statistics.mean(r["decision"]["billed"] / r["bytes"] for r in called)
    mean_bound = statistics.mean(r["decision"]["bound"] / r["bytes"] for r in called)
    worst_billed = max(called, key=lambda r: r["decision"]["billed"] / r["bytes"])
    mean_seal = statistics.mean(r["seal"]["sent"] / r["bytes"] for r in called)
    costlier = sum(1 for r in called if r["decision"]["sent"] > r["seal"]["sent"])
    costlier_billed = sum(1 for r in called if r["decision"]["billed"] > r["seal"]["billed"])
    print(f"mean model input / transcript over the {len(called)} of {len(rows)} transcripts where decision mode "
          f"made calls: decision {mean_decision:.2f} (goal <= {GOAL}; aim <= 1), worst "
          f"{worst['decision']['sent'] / worst['bytes']:.2f} ({worst['name']}"
          f"{'; above ' + str(GOAL) + ' on its own' if worst['decision']['sent'] > GOAL * worst['bytes'] else ''}), "
          f"seal {mean_seal:.2f}; "
          f"decision costlier than the seal's one call on {costlier} of {len(called)}")
    print(f"as billed with prompt caching, as the requests were sent (a request reads at "
          f"{CACHED_INPUT_PRICE_FACTOR:g}x the input price the prefix of at least {CACHE_MIN_BYTES} bytes it shares with a request answered before it "
          f"was sent; provider latency {LATENCY_S:g} s): decision {mean_billed:.2f}, worst "
          f"{worst_billed['decision']['billed'] / worst_billed['bytes']:.2f} ({worst_billed['name']}); costlier "
          f"than the seal's one call on {costlier_billed} of {len(called)}; if every request after the first of its "
          f"kind read the common prefix (a bound no request's concurrent batches reach): {mean_bound:.2f}")
    judged = [r for r in called if r["decision"]["shared"] >= CACHE_MIN_BYTES]
    missed = [r["name"] for r in judged if prefix_missed(r)]
    print(f"one cacheable prefix: {len(judged)} of {len(called)} transcripts share at least {CACHE_MIN_BYTES} bytes "
          f"of state across their decision requests; "
          + (f"NOT sent as their common prefix on {len(missed)}: {', '.join(missed)}" if missed
             else "each sends all of it as the requests' common prefix"))
    for row in sessions:  # the product's path for these files; not in the mean, which stays the table's
        d = row["decision"]
        print(f"as compactor compact sends it (anthropic-messages, its items {row['bytes']} bytes): {row['name']}: "
              f"decision {d['sent']} bytes in {d['calls']} calls, {d['sent'] / row['bytes']:.2f} (shared state "
              f"{d['shared']} bytes), seal {row['seal']['sent'] / row['bytes']:.2f}")
    return 0 if mean_decision <= GOAL and not missed else 1


if __name__ == "__main__":
    sys.exit(main())
