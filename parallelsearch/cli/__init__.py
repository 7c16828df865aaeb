"""``parallelsearch`` command line: wires the sub-commands of this package's modules together and
turns expected errors into one clear line; any other exception is a bug and keeps its traceback
(docs/architecture.md, "Errors")."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from parallelsearch.cli import agents, demo, evaluate, serve, stores, train
from parallelsearch.stores.errors import ParallelSearchError, describe_validation_error

_MODULES = [stores, demo, agents, evaluate, train, serve]
#: printed as one line, exit 2: the project's errors, bad input (ValueError: the project's,
#: pydantic's, json's) and what the system says about a file, socket or permission (OSError)
EXPECTED_ERRORS = (ParallelSearchError, ValueError, OSError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parallelsearch",
        description="ParallelSearch: parallel sub-query search agents as LangGraph components.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in _MODULES:
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ValidationError as e:
        print(f"error: invalid {e.title} configuration: {describe_validation_error(e)}", file=sys.stderr)
        return 2
    except EXPECTED_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
