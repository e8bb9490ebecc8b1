"""cli/main.py: the parser is the command modules' own parsers, in one order; main runs the one
chosen and turns Quail's errors into `quail: error: ...` and exit 2."""

import os
import signal

import pytest

from quail.cli.main import main, parser
from quail.kinds import KINDS
from tests.cli.test_bad_input import refused

LEAVES = [*KINDS, "pipeline", "explain", "band", "worker serve", "worker status", "worker stop", "answers stats",
          "answers clear", "models list", "models pull", "models prune"]


def _commands(p):
    return p._subparsers._group_actions[0].choices if p._subparsers else {}


def _leaves(p, path=()):
    for name, child in _commands(p).items():
        yield from _leaves(child, (*path, name)) if _commands(child) else [(" ".join((*path, name)), child)]


def test_the_commands_in_the_order_of_quail_help():
    assert list(_commands(parser())) == [*KINDS, "pipeline", "explain", "band", "worker", "answers", "models"]


def test_every_command_runs_itself():
    leaves = dict(_leaves(parser()))
    assert list(leaves) == LEAVES
    for name, p in leaves.items():
        assert callable(p.get_default("func")), name
        assert p.prog == f"quail {name}"


def test_no_command_or_an_unknown_one_is_refused(capsys):
    refused(capsys, says="the following arguments are required: command")
    refused(capsys, "sort", says="command invalid choice: 'sort'")


def test_a_quail_error_is_exit_2_and_success_exit_0(capsys, monkeypatch):
    def fails(args):
        raise __import__("quail.errors").errors.QuailError("no such thing")

    monkeypatch.setattr("quail.cli.models.list_models", fails)
    refused(capsys, "models", "list", says="quail: error: no such thing")
    monkeypatch.setattr("quail.cli.models.list_models", lambda args: print("listed"))
    with pytest.raises(SystemExit) as e:
        main(["models", "list"])
    assert e.value.code == 0 and capsys.readouterr().out == "listed\n"


@pytest.mark.parametrize("argv, parameter, engine, says", [
    (["filter", "i.parquet", "--text-column", "t", "--predicate", "Q?", "--output", "o.parquet"], "arena_pages",
     "arena_pages 5 is too small: row 3 needs 9 pages", "--arena-pages 5 is too small: row 3 needs 9 pages"),
    # only the parameter's own mention: "model" later is a word of the text
    (["worker", "serve"], "model", "model 'x': not an embedded model", "--model 'x': not an embedded model"),
    (["pipeline", "p.yaml"], "truncate", "row 1: too long. Set truncate to cut",
     "row 1: too long. Set --truncate to cut"),
    # `quail pipeline` takes its outputs from the file, where the key is `output`
    (["pipeline", "p.yaml"], "output", "output o.csv: outputs are Parquet files",
     "output o.csv: outputs are Parquet files"),
    (["models", "list"], None, "no such thing", "no such thing"),
])
def test_an_engine_error_names_the_flag_of_its_parameter(argv, parameter, engine, says):
    """The engine names a parameter as its API spells it (issue 49); the CLI names the flag that sets it."""
    from quail.cli.main import cli_message
    from quail.errors import QuailError

    ap = parser()
    assert cli_message(QuailError(engine, parameter=parameter), ap, ap.parse_args(argv)) == says


def test_sigterm_exits_so_that_cleanup_runs(monkeypatch):
    monkeypatch.setattr("quail.cli.models.list_models", lambda args: os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as e:
            main(["models", "list"])
    finally:
        signal.signal(signal.SIGTERM, before)
    assert e.value.code == 128 + signal.SIGTERM
