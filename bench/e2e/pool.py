"""One worker against two behind one connection: a filter -> classify DAG of ROWS rows, either split
into two partitions (an operator mapped over two source files, as a user partitions a daily table,
the two partitions' task instances run at once as an executor with two slots runs them), or one
table whose windows (ROWS / 4 rows each) the task fans out over the workers. Each worker is
`quail worker serve --threads 1` on the tiny random Llama (bench/common/tiny.py); the answer store is off,
so both setups compute everything. Reports the wall time of each, their ratio (the target is 0.6
or less), the tokens computed (equal) and whether the outputs are equal.

    python -m bench e2e pool [--rows 4000] [--mode partitions|windows]

The task instances are the real operators' `execute` with the map index a mapped task instance
has, each partition's in a process of its own (started and imported before the clock starts, as
an executor's slots are): what routes a partition to its worker is the hook's, as in Airflow.
"""

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq

from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator
from bench.common.results import parser, write_json
from bench.common.tiny import random_words_table, tiny_model
from quail.worker.client import WorkerClient

TOKEN = "bench-pool-token"


def start_workers(n: int, model: Path, folder: Path) -> list[subprocess.Popen]:
    token_file = folder / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    procs, locations = [], []
    for i in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        locations.append(f"grpc://127.0.0.1:{port}")
        log = open(folder / f"worker-{i}.log", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "quail.cli", "worker", "serve", "--model", str(model), "--dtype", "float32",
             "--port", str(port), "--token-file", str(token_file), "--threads", "1", "--no-answer-store",
             "--arena-pages", "4096"], stdout=log, stderr=log, start_new_session=True,
            env=dict(os.environ, QUAIL_HOME=str(folder / f"home-{i}"))))
    for location, proc in zip(locations, procs):
        deadline = time.time() + 300
        while True:
            try:
                WorkerClient(location, TOKEN, timeout=5).info()
                break
            except Exception:
                assert proc.poll() is None and time.time() < deadline, f"the worker at {location} did not start"
                time.sleep(0.5)
    return procs, locations


def partition(p: int, parts: list[Path], out: Path, window_rows: int) -> dict:
    """One partition's filter, then its classify, as two mapped task instances of index p (or, one
    partition alone, as plain task instances)."""
    index = p if len(parts) > 1 else -1

    def context(task: str) -> dict:
        return {"ti": SimpleNamespace(dag_id="quail_pool_bench", task_id=task, run_id="r1", map_index=index,
                                      try_number=1)}

    kept = LLMFilterOperator(task_id="kept", source=str(parts[p]), text_column="text", threshold=0.0,
                             predicates=["Is this about sport?", "Is it about a team?"],
                             target=str(out / f"kept-{p}.parquet"), quail_conn_id="quail_pool", window_rows=window_rows)
    topic = LLMClassifyOperator(task_id="topic", source=str(out / f"kept-{p}.parquet"), text_column="text",
                                labels=["sport", "business", "politics"], target=str(out / f"topic-{p}.parquet"),
                                quail_conn_id="quail_pool", window_rows=window_rows)
    return {"kept": kept.execute(context("kept")), "topic": topic.execute(context("topic"))}


def _imported() -> None:
    """What a task process has imported before its task starts."""
    import airflow_quail.operators  # noqa: F401


def setup(workers: int, model: Path, parts: list[Path], folder: Path, window_rows: int) -> dict:
    procs, locations = start_workers(workers, model, folder)
    os.environ["AIRFLOW_CONN_QUAIL_POOL"] = json.dumps(
        {"conn_type": "quail", "password": TOKEN, "extra": {"workers": locations, "answer_store": False}})
    out = folder / "out"
    out.mkdir()
    try:
        with ProcessPoolExecutor(len(parts), mp_context=multiprocessing.get_context("spawn")) as slots:
            for warm in [slots.submit(time.sleep, 2) for _ in parts]:  # one process per slot, started now
                warm.result()
            for warm in [slots.submit(_imported) for _ in parts]:
                warm.result()
            started = time.perf_counter()
            futures = {p: slots.submit(partition, p, parts, out, window_rows) for p in range(len(parts))}
            results = {p: f.result() for p, f in futures.items()}
            wall = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert len(results) == len(parts), "a partition failed: see the workers' logs in " + str(folder)
    computed = sum(m["stats"]["tokens_computed"] for r in results.values() for m in r.values())
    ran_on = {f"{task}-{p}": sorted(m["workers"]) for p, r in results.items() for task, m in r.items()}
    outputs = [pq.read_table(out / f"topic-{p}.parquet").to_pylist() for p in range(len(parts))]
    return {"workers": workers, "wall_s": round(wall, 1), "tokens_computed": computed, "ran_on": ran_on,
            "outputs": outputs}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--mode", default="partitions", choices=["partitions", "windows"])
    args = ap.parse_args(argv)
    rows, mode = args.rows, args.mode
    model = tiny_model()
    data = pq.read_table(random_words_table(rows))
    with tempfile.TemporaryDirectory(prefix="quail-pool-bench-") as d:
        folder = Path(d)
        n = 2 if mode == "partitions" else 1  # the daily table partitioned in two, or whole
        parts = []
        for p in range(n):
            parts.append(folder / f"part-{p}.parquet")
            pq.write_table(data.slice(p * rows // n, rows // n), parts[-1])
        window_rows = rows // n if mode == "partitions" else rows // 4
        runs = []
        for workers in (1, 2):
            (folder / f"w{workers}").mkdir()
            runs.append(setup(workers, model, parts, folder / f"w{workers}", window_rows))
    one, two = runs

    def close(a: list[dict], b: list[dict]) -> bool:
        return all(x.keys() == y.keys() and all(abs(x[k] - y[k]) < 1e-4 if isinstance(x[k], float) else x[k] == y[k]
                                                for k in x) for x, y in zip(a, b)) and len(a) == len(b)

    figures = {
        "rows": rows, "mode": mode, "partitions": n, "window_rows": window_rows,
        "one_worker": {k: one[k] for k in ("wall_s", "tokens_computed", "ran_on")},
        "two_workers": {k: two[k] for k in ("wall_s", "tokens_computed", "ran_on")},
        "wall_ratio": round(two["wall_s"] / one["wall_s"], 3), "target_ratio": 0.6,
        "tokens_equal": one["tokens_computed"] == two["tokens_computed"],
        "outputs_equal": all(close(a, b) for a, b in zip(one["outputs"], two["outputs"])),
    }
    print(json.dumps(figures, indent=1))
    write_json(args, figures)
