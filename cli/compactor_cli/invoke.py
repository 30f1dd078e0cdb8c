"""``compactor invoke LOGICAL_ID -e EVENT.json``: run one function of ``template.yaml`` in-process.

The Docker-free stand-in for ``sam local invoke``: the function's Globals and Environment are applied
(parameters at their defaults unless ``--param K=V``; not the billing tables' names), its CodeUri and layers go on ``sys.path``, and
the handler gets a Lambda-like context with the function's timeout. The handler's result is printed
as JSON on stdout; whatever the function prints or logs goes to stderr, as with SAM CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from compactor_cli.files import InputError, display_name, read_text
from compactor_cli.lambda_runtime import LocalLambdaContext, load_handler
from compactor_cli.sam_template import Template, TemplateError, as_string

LAMBDA_DEFAULT_TIMEOUT_S = 3
STACK_RESOURCE_VARIABLES = ("COMPACTOR_USAGE_TABLE", "COMPACTOR_IDEMPOTENCY_TABLE", "COMPACTOR_RESPONSES_BUCKET",
                            "COMPACTOR_ARCHIVE_BUCKET", "COMPACTOR_JOBS_BUCKET", "COMPACTOR_WINDOWED_STATE_MACHINE_ARN")
"""Variables naming the deployed stack's billing, archive, upload and windowed-job resources: never applied locally,
where the ledger and idempotency records stay in memory unless the shell names tables (docs/billing.md; the instances
of ``compactor serve --workers`` share them through files), restorable originals go to a local directory
(docs/archives.md), uploads answer 503 unless the shell names a jobs bucket (docs/scale.md), and an object over
``S3InlineMaxBytes`` is compacted by the S3 function itself, in windows, as without a state machine (up to 64 MiB),
unless the shell names one. Applied, a variable held the resource's logical id (``TranscriptBucket``), which no AWS
call can use: ``compactor invoke S3CompactFunction`` on an object over 8 MiB failed on StartExecution ("Invalid State
Machine Arn: 'WindowedJobStateMachine'", exit 1)."""
LAMBDA_DEFAULT_MEMORY_MB = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``invoke`` subcommand."""
    parser.add_argument("logical_id", metavar="LOGICAL_ID", help="function resource in the template")
    parser.add_argument("-e", "--event", required=True, help="event JSON file ('-' = stdin)")
    parser.add_argument("-t", "--template", default="template.yaml", help="SAM template (default: template.yaml)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="template parameter override (repeatable)")


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise TemplateError(f"--param expects KEY=VALUE, got {pair!r}")
        overrides[key] = value
    return overrides


class EventError(Exception):
    """An event file that is not a JSON object."""


def _read_event(source: str) -> dict[str, Any]:
    """The event in ``source`` (``-``: stdin): every function of the template takes an object (API Gateway's,
    S3's, the state machines'), so anything else is a mistake (a transcript given instead, say)."""
    name = display_name(source)
    try:
        event = json.loads(read_text(source))
    except json.JSONDecodeError as exc:
        raise EventError(f"{name}: not JSON: {exc}") from None
    if not isinstance(event, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(event), "a number")
        raise EventError(f"{name}: the event is {kind}, not a JSON object (the shape of tests/events/*.json)")
    return event


def invoke(template: Template, logical_id: str, event: Any) -> Any:
    """Run ``logical_id`` on ``event`` in this process and return the handler's result.

    The environment is the function's for the duration of the call (restored afterwards); the
    handler's own stdout is sent to stderr.
    """
    properties = template.function_properties(logical_id)
    timeout_s = float(properties.get("Timeout", LAMBDA_DEFAULT_TIMEOUT_S))
    memory_mb = int(properties.get("MemorySize", LAMBDA_DEFAULT_MEMORY_MB))
    region = os.environ.get("AWS_REGION", "us-east-1")
    declared = (properties.get("Environment") or {}).get("Variables") or {}
    variables = {
        "AWS_REGION": region,
        "AWS_LAMBDA_FUNCTION_NAME": logical_id,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        **{key: as_string(value) for key, value in declared.items() if key not in STACK_RESOURCE_VARIABLES},
    }
    layers = [path for path in (template.layer_path(layer) for layer in properties.get("Layers", [])) if path]
    code_dir = template.directory / str(properties.get("CodeUri", "."))
    saved_environ = dict(os.environ)
    try:
        os.environ.update(variables)
        with contextlib.redirect_stdout(sys.stderr):
            handler = load_handler(code_dir, str(properties["Handler"]), layers)
            context = LocalLambdaContext(logical_id, timeout_s, memory_limit_in_mb=memory_mb, region=region)
            return handler(event, context)
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``compactor invoke``: 0 when the handler returned, 1 when it raised, 2 on bad input."""
    try:
        template = Template.load(Path(args.template), _parse_overrides(args.param))
        event = _read_event(args.event)
        template.function_properties(args.logical_id)
    except (TemplateError, OSError, InputError, EventError) as exc:
        print(f"compactor invoke: {exc}", file=sys.stderr)
        return 2
    try:
        result = invoke(template, args.logical_id, event)
    except Exception as exc:  # the function failed: report it the way Lambda does
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"errorMessage": str(exc), "errorType": type(exc).__name__}))
        return 1
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0
