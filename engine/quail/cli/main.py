"""The `quail` command line: filter, classify and join a Parquet or CSV file; run or explain a
pipeline of several operators in one engine session; manage models."""

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from quail.cli import answers, band, explain, models, run, worker
from quail.cli.common import Parser
from quail.errors import QuailError

# each module adds its own commands, in this order in `quail --help`, each with its `func`
COMMANDS = (run, explain, band, worker, answers, models)


def parser() -> argparse.ArgumentParser:
    ap = Parser(prog="quail", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return ap


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that cleanup runs: temporary files go, no output is replaced


def main(argv: Sequence[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminated)  # `quail worker serve` sets its own
    try:
        args = parser().parse_args(argv)
        args.func(args)
    except QuailError as e:
        print(f"quail: error: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(0)
