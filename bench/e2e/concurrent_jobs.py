"""Two filter jobs of 90 jokes each on one in-process worker: one after the other, then submitted
together, so that the engine batches them into the same forward passes. Prints wall time, engine
passes and the passes the jobs count (a shared pass counts in each job).

    python -m bench e2e concurrent_jobs
"""

import tempfile
import time

import pyarrow.csv as pacsv

from bench.common.results import ROOT, parser, write_json
from quail.planner.plan import plan
from quail.reuse import Reuse
from quail.session import Session
from quail.specs import OperatorSpec
from quail.worker.client import WorkerClient
from quail.worker.jobs import Origin
from quail.worker.server import Worker

SPEC = OperatorSpec("tech", "filter", ("jokes",), ("joke",), ("Is this joke about Java?", "Is it funny?"),
                    threshold=0.0)


def main(argv: list[str] | None = None) -> None:
    args = parser(__name__, __doc__).parse_args(argv)
    jokes = pacsv.read_csv(ROOT / "examples" / "jokes.csv").column("joke").to_pylist()
    halves = [jokes[:90], jokes[90:180]]
    session = Session.open("smollm2-135m", "bfloat16", arena_pages=4096)  # bf16: the figures in the note
    socket = f"grpc+unix://{tempfile.mkdtemp()}/w.sock"
    worker = Worker(session, socket, token="bench")
    client, entry = WorkerClient(socket, "bench"), plan([SPEC])["tech"]

    def run(runs: list[str], together: bool) -> dict:
        start, passes, jobs = time.perf_counter(), session.engine.scheduler.forward_passes, []
        for half, run_id in zip(halves, runs):
            job, _ = client.submit(Origin("bench", "tech", run_id), SPEC, entry, Reuse(), [(half, list(range(90)))])
            if not together:
                client.wait(job, poll=0.02)
            jobs.append(job)
        done = [client.wait(job, poll=0.02) for job in jobs]
        return {"seconds": round(time.perf_counter() - start, 2),
                "engine_passes": session.engine.scheduler.forward_passes - passes,
                "job_passes": sum(s["stats"]["forward_passes"] for s in done),
                "tokens_computed": sum(s["stats"]["tokens_computed"] for s in done)}

    def line(r: dict) -> str:
        return (f"{r['seconds']:.1f} s, {r['engine_passes']} passes (the jobs count {r['job_passes']}), "
                f"{r['tokens_computed']:,} tokens")

    run(["warm-up"], False)
    figures = {"one_after_the_other": run(["a1", "a2"], False), "at_once": run(["b1", "b2"], True)}
    worker.shutdown()
    print("one after the other:", line(figures["one_after_the_other"]))
    print("at once:            ", line(figures["at_once"]))
    write_json(args, {"model": "smollm2-135m", "dtype": "bfloat16", "jobs": 2, "rows_per_job": 90} | figures)
