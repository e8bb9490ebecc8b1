"""A task's try: a retry on a worker whose model changed computes every window anew, reusing none of
the windows the first try staged. (Staging, resuming, re-attaching, budgets and reconnects through
the operators: operators/test_llm.py; the fan-out: operators/test_fan_out.py.)"""

import json
import math
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_quail import runs
from airflow_quail.operators import LLMClassifyOperator
from quail.worker.local import stop_local_workers
from tests.edits import copy_model, scale_tensor_in_place


def _context(try_number: int) -> dict:
    return {"ti": SimpleNamespace(dag_id="news", task_id="sport", run_id="r1", map_index=-1, try_number=try_number)}


def test_a_retry_after_the_model_changed_in_place_recomputes_its_staged_windows(tiny_model_dir, tmp_path,
                                                                                monkeypatch):
    """The first try stages its three windows and fails writing; the connection's model file is then
    edited in place (size and mtime kept). The retry's worker is a new one on the new weights, and
    no window the old weights computed is reused: the output equals a run from scratch."""
    model = copy_model(tiny_model_dir, tmp_path / "model")
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_DEFAULT", json.dumps(
        {"conn_type": "quail", "extra": {"model": str(model), "dtype": "float32", "arena_pages": 256}}))
    source, target = tmp_path / "news.parquet", str(tmp_path / "out.parquet")
    pq.write_table(pa.table({"text": [f"Match report {i}: the home side won." for i in range(12)]}), source)

    def op(target: str, reuse: bool = True) -> LLMClassifyOperator:
        return LLMClassifyOperator(task_id="sport", source=str(source), text_column="text", target=target,
                                   labels=["sport", "money"], window_rows=4, reuse=reuse)

    write = runs.write_target

    def fail_once(*args):
        monkeypatch.setattr(runs, "write_target", write)
        raise OSError("the target's database is down")

    monkeypatch.setattr(runs, "write_target", fail_once)
    try:
        with pytest.raises(OSError):
            op(target).execute(_context(1))
        assert len(list(tmp_path.glob(".out.parquet.quail-*/window-*.parquet"))) == 3
        old = pq.read_table(next(tmp_path.glob(".out.parquet.quail-*/window-000000-*.parquet")))
        scale_tensor_in_place(model, 0, 2.0)  # lm_head
        op(target).execute(_context(2))
        op(str(tmp_path / "fresh.parquet"), reuse=False).execute(_context(1))
    finally:
        stop_local_workers(tmp_path / "home" / "worker")
    got, fresh = pq.read_table(target), pq.read_table(tmp_path / "fresh.parquet")
    assert got.num_rows == 12
    for a, b in zip(got.column("p_sport").to_pylist(), fresh.column("p_sport").to_pylist()):
        assert math.isclose(a, b, rel_tol=1e-4)
    assert not math.isclose(old.column("p_sport")[0].as_py(), got.column("p_sport")[0].as_py(), rel_tol=1e-4)
