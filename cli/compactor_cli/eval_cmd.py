"""``compactor eval FILE|DIR…``: evidence kept per byte for every compaction method (docs/evaluation.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from compactor.transcripts import TranscriptError, parse_transcript
from compactor_cli.files import InputError, read_text, unwritable

SUFFIXES = (".json", ".jsonl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # "*", not "+": `--lost FILE|DIR` takes the path for its METHODS, which run() gives back (argparse refused the
    # command line for its missing paths before run() could)
    parser.add_argument("paths", nargs="*", metavar="FILE|DIR",
                        help="transcripts, or directories whose *.json/*.jsonl files are transcripts")
    parser.add_argument("--json", action="store_true", help="print the rows and means as JSON")
    parser.add_argument("--html", metavar="FILE", help="also write a page plotting bytes against evidence kept")
    parser.add_argument("--catalog", help="catalog JSON replacing the bundled offline offers")
    parser.add_argument("--methods", help="comma-separated modes to run (default: every registered mode)")
    parser.add_argument("--target-ratio", type=float, help="decision mode target (default: the service default)")
    parser.add_argument("--lost", nargs="?", const="decision", metavar="METHODS",
                        help="after the table, list each evidence item a method lost, per transcript, with the input "
                             "message it came from (comma-separated methods; default: decision)")


def transcript_files(paths: list[str]) -> list[Path]:
    """The files named, and each named directory's own ``*.json``/``*.jsonl`` files. A subfolder is not
    read (the corpus keeps format fixtures in its subfolders, outside the table: docs/evaluation.md); one
    holding such files is named on stderr, so that nothing is left out silently."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SUFFIXES))
            for sub in sorted(p for p in path.iterdir() if p.is_dir()):
                if any(p.is_file() and p.suffix in SUFFIXES for p in sub.rglob("*")):
                    print(f"compactor eval: {sub}: a subfolder: not read (name it to evaluate its transcripts)",
                          file=sys.stderr)
        else:
            files.append(path)
    return files


def _lost_path(args: argparse.Namespace, methods: list[str]) -> None:
    """``--lost FILE|DIR``: argparse gives an optional value the word after the option, so the first path was taken
    for the methods (and the command refused for want of a path). A value that is no list of methods and names a
    file or directory (or reads as one) is that path, and ``--lost`` lists decision's items."""
    value = args.lost
    if not value or all(part.strip() in methods for part in value.split(",")):
        return
    if Path(value).exists() or "/" in value or value.endswith(SUFFIXES):
        args.paths.insert(0, value)
        args.lost = "decision"


def run(args: argparse.Namespace) -> int:
    from compactor.catalog import CatalogError
    from compactor.container import run_sync
    from compactor_cli.evaluation import evaluate, means, mode_names, render, render_lost

    if args.catalog:
        os.environ["COMPACTOR_CATALOG"] = args.catalog
    _lost_path(args, [*mode_names(), "trim"])
    if not args.paths:
        print("compactor eval: name at least one transcript FILE or DIR", file=sys.stderr)
        return 2
    modes = [mode.strip() for mode in args.methods.split(",")] if args.methods else mode_names()
    unknown = [mode for mode in modes if mode not in mode_names()]
    if unknown:
        print(f"compactor eval: --methods: unknown {', '.join(map(repr, unknown))}; "
              f"one or more of {', '.join(mode_names())} (trim comes with decision)", file=sys.stderr)
        return 2
    lost = [method.strip() for method in args.lost.split(",")] if args.lost else []
    strange = [method for method in lost if method not in [*modes, "trim"] or (method == "trim" and "decision" not in modes)]
    if strange:
        print(f"compactor eval: --lost: {', '.join(map(repr, strange))} not among the methods run "
              f"({', '.join(modes)}{', trim' if 'decision' in modes else ''})", file=sys.stderr)
        return 2
    if args.target_ratio is not None and not 0 < args.target_ratio <= 1:
        print(f"compactor eval: --target-ratio {args.target_ratio}: must be in (0, 1]", file=sys.stderr)
        return 2
    problem = args.html and unwritable(args.html, "--html")
    if problem:
        print(f"compactor eval: {problem}", file=sys.stderr)
        return 2
    rows = []
    for path in transcript_files(args.paths):
        try:
            messages, _ = parse_transcript(read_text(str(path)))
        except InputError as exc:
            print(f"compactor eval: {exc}: skipped", file=sys.stderr)
            continue
        except TranscriptError as exc:
            print(f"compactor eval: {path}: skipped: {exc}", file=sys.stderr)
            continue
        if not messages:
            print(f"compactor eval: {path}: skipped: no chat messages", file=sys.stderr)
            continue
        settings = {} if args.target_ratio is None else {"target_ratio": args.target_ratio}
        try:
            # a name's bytes that are not UTF-8 as \xNN: as lone surrogates they failed the page and the table
            name = os.fsencode(path.stem).decode("utf-8", "backslashreplace")
            rows.extend(run_sync(evaluate(name, messages, modes, settings)))
        except CatalogError as exc:
            print(f"compactor eval: {exc}", file=sys.stderr)
            return 2
    if not rows:
        print("compactor eval: no transcripts", file=sys.stderr)
        return 2
    document = {"rows": [r.as_json() for r in rows], "means": means(rows)}
    if args.html:
        from compactor_cli.eval_html import render_eval_html

        Path(args.html).write_text(render_eval_html(document), encoding="utf-8")
        print(f"compactor eval: wrote {args.html}", file=sys.stderr)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(render(rows))
        if lost:
            sys.stdout.write("\n" + render_lost(rows, lost))
    return 0
