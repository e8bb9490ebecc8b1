"""The operator kinds are objects in one registry: the CLI's commands, a pipeline file's keys, the
planner and the worker all take them from there, and importing them loads no torch."""

import subprocess
import sys

import pytest

from quail.cli.main import parser
from quail.errors import QuailError
from quail.kinds import KINDS
from quail.kinds.base import OperatorKind
from quail.kinds.settings import Settings
from quail.planner.plan import plan
from quail.specs import OperatorSpec
from quail.runtime import RUNTIMES
from quail.runtime.base import KindRuntime


def test_every_kind_is_a_command_with_its_own_arguments_and_a_run_time_class():
    commands = parser()._subparsers._group_actions[0].choices
    assert set(KINDS) <= set(commands)
    assert set(RUNTIMES) == set(KINDS)
    for name, kind in KINDS.items():
        overridden = [m for m in ("add_arguments", "from_args", "tokens", "prompts")
                      if getattr(type(kind), m) is not getattr(OperatorKind, m)]
        assert len(overridden) == 4, f"{name} leaves some of the interface to the base class"
        assert issubclass(kind.settings, Settings) and kind.settings.kind == name
        run = RUNTIMES[name]
        assert type(run.kind) is type(kind)
        assert all(getattr(type(run), m) is not getattr(KindRuntime, m) for m in ("compute", "shape")), name


def test_validation_is_the_kinds_own():
    with pytest.raises(QuailError, match="at least two distinct labels"):
        plan([OperatorSpec("c", "classify", ("t",), ("text",), ("Q?",), ("a", "a"))])
    with pytest.raises(QuailError, match="a join takes 2 input"):
        plan([OperatorSpec("j", "join", ("t",), ("text",), ("Q?",))])
    with pytest.raises(QuailError, match="unknown classify keys \\['limit'\\]"):
        plan([OperatorSpec("c", "classify", ("t",), ("text",), ("Q?",), ("a", "b"), limit=3)])
    with pytest.raises(QuailError, match="kind 'sort' is not one of filter, classify, join"):
        plan([OperatorSpec("s", "sort", ("t",), ("text",), ("Q?",))])


def test_the_kinds_and_the_planner_import_no_torch():
    code = "import sys, quail.kinds, quail.planner.plan; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
