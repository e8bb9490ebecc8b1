"""The entry point: every benchmark is listed, starts (its module imports and `--help` exits 0) and
takes --output-json; and the results helper writes the run's record beside the figures."""

import contextlib
import importlib
import io
import json
from pathlib import Path

import pytest

from bench.__main__ import KINDS, benchmarks, listing
from bench.common.results import parser, write_json

ALL = [(kind, name) for kind in KINDS for name in benchmarks(kind)]


def test_every_kind_has_benchmarks_and_the_listing_names_them() -> None:
    assert all(benchmarks(kind) for kind in KINDS)
    text = listing(list(KINDS))
    assert all(f"  {name} " in text for _, name in ALL)


@pytest.mark.parametrize("kind, name", ALL, ids=[f"{k}-{n}" for k, n in ALL])
def test_every_benchmark_starts_and_takes_output_json(kind: str, name: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        importlib.import_module(f"bench.{kind}.{name}").main(["--help"])
    assert done.value.code == 0
    assert out.getvalue().startswith(f"usage: python -m bench {kind} {name}")
    assert "--output-json" in out.getvalue() or (kind, name) == ("gpu", "prepare")  # a setup step: no figures


def test_a_run_writes_its_record_and_figures(tmp_path: Path) -> None:
    args = parser("bench.micro.example", "An example.").parse_args(["--output-json", str(tmp_path / "x.json")])
    path = write_json(args, {"rows": [1, 2], "benchmark": "an old record's"}, markdown="| a |\n")
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == "micro example" and doc["rows"] == [1, 2]
    assert {"date", "commit", "dirty", "argv", "machine"} <= set(doc) and doc["machine"]["cores"] >= 1
    assert path.with_suffix(".md").read_text() == "| a |\n"
    default = parser("bench.scale.pool_sim", None).parse_args([])
    assert default.output_json is None and default.stem == "pool-sim"
