"""``compactor compact FILE``: compact a transcript file, report on stderr, result to --output/stdout."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from compactor.transcripts import TranscriptError, parse_transcript


def _json_arg(value: str) -> Any:
    """A JSON value given inline or as ``@path``."""
    text = open(value[1:], encoding="utf-8").read() if value.startswith("@") else value
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="transcript: JSON array, object with 'messages', or JSONL ('-' = stdin)")
    parser.add_argument("--mode", choices=("decision", "seal"), default="decision",
                        help="decision-guided (default) or legacy single-summary seal")
    parser.add_argument("--target-ratio", type=float, help="decision mode target, 0 < r <= 1 (default 0.1)")
    parser.add_argument("--keep-recent", type=int, help="messages of recent tail always kept (default 6)")
    parser.add_argument("--pin", type=int, action="append", dest="pins", metavar="INDEX",
                        help="protect this message index (repeatable; default: every user message)")
    parser.add_argument("--pin-task", action="store_true",
                        help="pin only the first user message (for agents whose observations are user messages)")
    parser.add_argument("--decision-policy", type=_json_arg, help="Σ_pol policy for decisions (JSON or @file)")
    parser.add_argument("--policy", type=_json_arg, help="Σ_pol policy for summaries (JSON or @file)")
    parser.add_argument("--max-tokens", type=int, help="summary max_tokens (default 512)")
    parser.add_argument("--catalog", help="catalog JSON replacing the bundled offline offers")
    parser.add_argument("--output", "-o", help="write the compacted body here instead of stdout")
    parser.add_argument("--json", action="store_true", help="write the raw /v1/compact response, not just messages")
    parser.add_argument("--quiet", "-q", action="store_true", help="no report on stderr")


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def build_request_body(args: argparse.Namespace, messages: list[dict[str, Any]],
                       fields: dict[str, Any]) -> dict[str, Any]:
    from compactor.compaction.preset import load_preset

    body: dict[str, Any] = {**fields, "messages": messages}
    if args.pin_task:
        first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        task = [] if first_user is None else [first_user]
        body["pinned_indices"] = sorted(set(task) | set(args.pins or []))
    for key, value in (("target_ratio", args.target_ratio), ("keep_recent", args.keep_recent),
                       ("pinned_indices", None if args.pin_task else args.pins), ("policy_ir", args.policy), ("max_tokens", args.max_tokens)):
        if value is not None:
            body[key] = value
    if args.mode == "decision":
        if args.decision_policy is not None:
            body["decision_policy_ir"] = args.decision_policy
        body.setdefault("decision_policy_ir", load_preset()["flow"][1]["classify"]["policy"])
    else:
        body.pop("decision_policy_ir", None)
    return body


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    if args.catalog:
        os.environ["COMPACTOR_CATALOG"] = args.catalog
    try:
        messages, fields = parse_transcript(_read(args.file))
    except (OSError, TranscriptError) as exc:
        print(f"compactor compact: {args.file}: {exc}", file=sys.stderr)
        return 2
    from compactor.models import CompactRequest

    try:
        request = CompactRequest.model_validate(build_request_body(args, messages, fields))
    except ValidationError as exc:
        print(f"compactor compact: invalid request: {exc}", file=sys.stderr)
        return 2
    from compactor.catalog import CatalogError
    from compactor_cli.report import Progress, render_report

    progress = None if args.quiet else Progress(sys.stderr)
    started = time.monotonic()
    try:
        status, body = _compact(request, progress)
    except CatalogError as exc:
        print(f"compactor compact: {exc}", file=sys.stderr)
        return 2
    if progress:
        progress.finish()
    if status != 200:
        print(f"compactor compact: HTTP {status}: {json.dumps(body)}", file=sys.stderr)
        return 1
    if not args.quiet:
        sys.stderr.write(render_report(request, body, time.monotonic() - started))
    text = json.dumps(body if args.json else body["messages"], ensure_ascii=False, indent=2) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
        if not args.quiet:
            print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _compact(request: Any, progress: Any) -> tuple[int, dict[str, Any]]:
    from compactor.container import run_sync
    from compactor.service import compact, request_deadline

    on_event = progress.on_event if progress else None
    return run_sync(compact(request, deadline=request_deadline(), on_event=on_event))
