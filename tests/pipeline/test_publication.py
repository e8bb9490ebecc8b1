"""#33 items 10 and 11: a pipeline's outputs, stats and reviews change together or not at all, and a
writer killed (SIGTERM or SIGKILL) leaves no temporary file beside an output once the next run of it
has started."""

import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from quail.cli.main import main

pytestmark = pytest.mark.usefixtures("smollm2_for_every_session")
MODEL = ["--model", "smollm2-135m", "--dtype", "float32"]


def _pipeline(tmp_path, second_rows: list) -> list:
    pq.write_table(pa.table({"text": ["The striker scored.", "Rates rose."]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": second_rows}), tmp_path / "b.parquet")
    doc = {"tables": {"a": str(tmp_path / "a.parquet"), "b": str(tmp_path / "b.parquet")}, "operators": [
        {"name": "first", "filter": {"input": "a", "column": "text", "predicates": ["Is this about sport?"]},
         "output": str(tmp_path / "first.parquet"), "stats": str(tmp_path / "first.json")},
        {"name": "second", "classify": {"input": "b", "column": "text", "labels": ["sport", "money"]},
         "output": str(tmp_path / "second.parquet")}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    return ["pipeline", str(tmp_path / "p.yaml"), *MODEL]


def test_a_pipeline_that_fails_in_its_second_chain_changes_none_of_its_outputs(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(_pipeline(tmp_path, ["A match.", "A loan."]))
    assert e.value.code == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".parquet", ".json")}
    with pytest.raises(SystemExit) as e:
        main(_pipeline(tmp_path, ["A match."] * 3 + [None]))  # the second chain meets a null at row 3
    err = capsys.readouterr().err
    assert e.value.code == 2 and "row 3" in err, err
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".parquet", ".json")}
    assert after == before | {"b.parquet": after["b.parquet"]}  # the outputs and stats of the first run, whole
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_leaves_no_temporary_file_once_the_next_has_started(tmp_path, sig):
    rows = [f"Match report {i}: the home side won by {i} goals in the rain." for i in range(3000)]
    pq.write_table(pa.table({"text": rows}), tmp_path / "in.parquet")
    out = tmp_path / "out.parquet"
    argv = [sys.executable, "-m", "quail.cli", "filter", str(tmp_path / "in.parquet"), "--text-column", "text",
            "--predicate", "Is this about sport?", "--output", str(out), "--model", "smollm2-135m", "--keep-all",
            "--window-rows", "64", "--no-answer-store"]
    run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not list(tmp_path.glob(".out.parquet.*.tmp")):  # killed while it writes
        assert run.poll() is None and time.time() < deadline
        time.sleep(0.05)
    run.send_signal(sig)
    run.wait(60)
    left = list(tmp_path.glob(".out.parquet.*.tmp"))
    if sig == signal.SIGTERM:
        assert left == [] and run.returncode == 128 + signal.SIGTERM
        return
    assert left and not out.exists()
    pq.write_table(pa.table({"text": rows[:2]}), tmp_path / "in.parquet")
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    assert list(tmp_path.glob(".*.tmp")) == [] and pq.read_table(out).num_rows == 2
