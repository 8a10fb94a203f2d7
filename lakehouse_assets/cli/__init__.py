"""The `lakehouse` command: look at the tables and feed the landing zone, without Spark.

A command imports what it uses when it runs: `lakehouse --help` and `lakehouse sql` import
neither Spark nor Dagster, and reading a declaration does not import Dagster.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import LakehouseError
from ..settings import Settings
from . import landing, operations, project, readers, runs, services, tables

# Each module adds the commands of one subject (`register`), in the order `lakehouse --help` lists them.
_MODULES = (project, tables, landing, readers, runs, operations, services)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args, Settings.from_env())
    except (LakehouseError, ValueError, OSError, LookupError) as exc:
        print(f"lakehouse {args.command}: {exc}", file=sys.stderr)
        return 2
