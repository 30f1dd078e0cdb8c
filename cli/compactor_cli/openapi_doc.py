"""``python -m compactor_cli.openapi_doc [--check]``: write (or check) ``docs/openapi.json``, the document
``GET /v1/openapi.json`` answers, generated from the handler's routes (docs/api.md). ``make openapi`` runs it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compactor_cli.lambda_runtime import load_handler
from compactor_cli.serve import FUNCTION_HANDLER, default_code_dir

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def current_document(code_dir: Path | None = None) -> str:
    """The document of the handler in ``code_dir`` (default: this checkout's functions/compact)."""
    from compactor_aws.openapi import document_text

    load_handler(code_dir or default_code_dir(), FUNCTION_HANDLER)
    return document_text(sys.modules["compact"].app)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compactor_cli.openapi_doc", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs, writing nothing")
    parser.add_argument("path", nargs="?", type=Path, default=DOC_PATH)
    args = parser.parse_args(argv)
    text = current_document()
    if args.check:
        same = args.path.is_file() and args.path.read_text(encoding="utf-8") == text
        print(f"{args.path}: {'up to date' if same else 'out of date: run make openapi'}", file=sys.stderr)
        return 0 if same else 1
    args.path.write_text(text, encoding="utf-8")
    print(f"wrote {args.path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
