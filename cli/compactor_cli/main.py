"""The ``compactor`` command (also ``python -m compactor_cli``): ``compact``, ``eval``, ``serve``, ``invoke`` and
``usage``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence

from compactor import __version__

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a command Ctrl-C stopped

_SUBCOMMANDS = (
    ("compact", "compact_cmd", "compact a transcript file (JSON, object with messages, or JSONL)"),
    ("eval", "eval_cmd", "measure evidence kept per byte for every compaction method on transcripts"),
    ("doctor", "doctor", "check a catalog: fields, a decider and a summarizer, keys; --call sends one request each"),
    ("serve", "serve", "serve the HTTP API locally through the Lambda handler"),
    ("invoke", "invoke", "run one function of template.yaml in-process on an event (no Docker)"),
    ("usage", "usage_cmd", "per-key daily usage totals from the usage ledger (DynamoDB table or local file)"),
)


def whole_number(text: str, low: int, high: int | None = None) -> int:
    """An option's whole number from ``low`` (to ``high``), for an option's ``type``: else argparse's one-line error
    naming the option (a type function's own name, ``invalid _positive value``, was that line for a word)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}" if high is None
                                         else f"must be {low} to {high}, not {value}")
    return value


class _Once(logging.Filter):
    """Passes each distinct log line (logger, level, message) the first time only."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        line = (record.name, record.levelno, record.getMessage())
        if line in self.seen:
            return False
        self.seen.add(line)
        return True


@contextlib.contextmanager
def each_warning_once() -> Iterator[None]:
    """Within it, each distinct log line reaches stderr once: a run's report already groups its repeats (an offer's
    unset key variable was warned once per model call, 4 times in one compaction, before the report said it once
    with a count). On the handlers that print (the root's, else Python's last-resort stderr handler), removed after."""
    handlers = [*logging.getLogger().handlers, *([logging.lastResort] if logging.lastResort else [])]
    filters = [(handler, _Once()) for handler in handlers]  # one each: a line one handler printed, the next prints too
    for handler, once in filters:
        handler.addFilter(once)
    try:
        yield
    finally:
        for handler, once in filters:
            handler.removeFilter(once)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subcommand module supplies ``add_arguments`` and ``run``."""
    from importlib import import_module

    parser = argparse.ArgumentParser(prog="compactor", description="Compact LLM agent transcripts.")
    parser.add_argument("--version", action="version", version=f"compactor {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name, summary in _SUBCOMMANDS:
        module = import_module(f"{__package__}.{module_name}")
        subparser = subcommands.add_parser(name, help=summary, description=summary)
        module.add_arguments(subparser)
        subparser.set_defaults(run=module.run, parser=subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process arguments) and run the chosen subcommand."""
    import compactor_aws  # noqa: F401  (the Bedrock transport and Secrets Manager keys, as deployed)

    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # the subcommand's usage, not the top level's (argparse's own error names neither option list)
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's code for it, not a traceback
        import warnings

        # The event loop's tasks cut short would each print their KeyboardInterrupt again at exit.
        logging.getLogger("asyncio").disabled = True
        warnings.simplefilter("ignore")
        print(f"compactor {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
