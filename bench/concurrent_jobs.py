"""Two filter jobs of 90 jokes each on one in-process worker: one after the other, then submitted
together, so that the engine batches them into the same forward passes. Prints wall time, engine
passes and the passes the jobs count (a shared pass counts in each job).

    .venv/bin/python bench/concurrent_jobs.py
"""

import tempfile
import time
from pathlib import Path

import pyarrow.csv as pacsv

from quail.planner.plan import plan
from quail.specs import OperatorSpec
from quail.reuse import Reuse
from quail.session import Session
from quail.worker.client import WorkerClient
from quail.worker.jobs import Identity
from quail.worker.server import Worker

SPEC = OperatorSpec("tech", "filter", ("jokes",), ("joke",), ("Is this joke about Java?", "Is it funny?"),
                    threshold=0.0)


def main() -> None:
    jokes = pacsv.read_csv(Path(__file__).parents[1] / "examples" / "jokes.csv").column("joke").to_pylist()
    halves = [jokes[:90], jokes[90:180]]
    session = Session.open("smollm2-135m", "bfloat16", arena_pages=4096)  # bf16: the figures in the note
    socket = f"grpc+unix://{tempfile.mkdtemp()}/w.sock"
    worker = Worker(session, socket, token="bench")
    client, entry = WorkerClient(socket, "bench"), plan([SPEC])["tech"]

    def run(runs: list[str], together: bool) -> str:
        start, passes, jobs = time.perf_counter(), session.engine.scheduler.forward_passes, []
        for half, run_id in zip(halves, runs):
            job, _ = client.submit(Identity("bench", "tech", run_id), SPEC, entry, Reuse(), [(half, list(range(90)))])
            if not together:
                client.wait(job, poll=0.02)
            jobs.append(job)
        done = [client.wait(job, poll=0.02) for job in jobs]
        return (f"{time.perf_counter() - start:.1f} s, {session.engine.scheduler.forward_passes - passes} passes "
                f"(the jobs count {sum(s['stats']['forward_passes'] for s in done)}), "
                f"{sum(s['stats']['tokens_computed'] for s in done):,} tokens")

    run(["warm-up"], False)
    print("one after the other:", run(["a1", "a2"], False))
    print("at once:            ", run(["b1", "b2"], True))
    worker.shutdown()


if __name__ == "__main__":
    main()
