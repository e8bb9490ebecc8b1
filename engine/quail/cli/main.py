"""The `quail` command line: filter, classify and join a Parquet or CSV file; run or explain a
pipeline of several operators in one engine session; manage models."""

import argparse
import re
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


def flag(ap: argparse.ArgumentParser, args: argparse.Namespace | None, parameter: str) -> str | None:
    """The option of the command that `args` ran that sets `parameter` (its `dest`): `--arena-pages`
    for arena_pages. None where that command takes it otherwise (a pipeline file's `output`)."""
    while True:
        for action in ap._actions:
            if action.dest == parameter and action.option_strings:
                return max(action.option_strings, key=len)
        commands = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
        if args is None or not commands:
            return None
        ap = commands[0].choices[getattr(args, commands[0].dest)]


def cli_message(e: QuailError, ap: argparse.ArgumentParser, args: argparse.Namespace | None) -> str:
    """The engine's message, naming its parameter by the flag that sets it: the engine speaks its API's
    words (`arena_pages 5 is too small`), the CLI its own (`--arena-pages 5 is too small`)."""
    if e.parameter is None or (option := flag(ap, args, e.parameter)) is None:
        return str(e)
    # the first mention is the parameter's own; a later one may be a word of the text ("model")
    return re.sub(rf"(?<![\w-]){re.escape(e.parameter)}(?![\w-])", option, str(e), count=1)


def main(argv: Sequence[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminated)  # `quail worker serve` sets its own
    ap, args = parser(), None
    try:
        args = ap.parse_args(argv)
        args.func(args)
    except QuailError as e:
        print(f"quail: error: {cli_message(e, ap, args)}", file=sys.stderr)
        sys.exit(2)
    sys.exit(0)
