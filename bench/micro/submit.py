"""The time to submit one window to a worker: a default window (8,192 rows) of documents of about
800 words, over a Unix socket, from the call to the worker's answer with the job id; then how long
the job takes to start computing (the worker tokenizes it off the request path).

    python -m bench micro submit [--rows 8192] [--words 800]
"""

import tempfile
import threading
import time
from pathlib import Path

from bench.common.results import parser, write_json
from quail.executor.engine import PhysicalSettings
from quail.model.loader import load_model
from quail.planner.plan import plan
from quail.reuse import Reuse
from quail.session import Session
from quail.specs import OperatorSpec
from quail.worker.client import WorkerClient
from quail.worker.jobs import Origin
from quail.worker.server import Worker


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--words", type=int, default=800)
    args = ap.parse_args(argv)
    rows, words = args.rows, args.words
    spec = OperatorSpec("sport", "filter", ("news",), ("text",), ("Is this article about sport?",))
    text = ("the home side won the match after a late goal in the second half " * (words // 13 + 1)).split()[:words]
    texts = [f"{i} " + " ".join(text) for i in range(rows)]
    with tempfile.TemporaryDirectory() as d:
        location = f"grpc+unix://{Path(d) / 'w.sock'}"
        session = Session(load_model("smollm2-135m", "float32"), PhysicalSettings(arena_pages=256, max_batch_tokens=512))
        server = Worker(session, location, token="bench")
        threading.Thread(target=server.serve, daemon=True).start()
        client = WorkerClient(location, "bench")
        t = time.perf_counter()
        job, _ = client.submit(Origin("bench", "sport", "r"), spec, plan([spec])["sport"], Reuse(),
                               [(texts, list(range(rows)))])
        submitted = time.perf_counter() - t
        while client.status(job)["rows_done"] == 0:
            time.sleep(0.1)
        computing = time.perf_counter() - t
        client.cancel(job)
        server.shutdown()
    mb = sum(map(len, texts)) / 1e6
    print(f"{rows:,} rows x {words} words ({mb:.1f} MB): submitted in {submitted:.2f} s (client timeout 30 s); "
          f"first rows computed {computing:.1f} s after the call")
    write_json(args, {"model": "smollm2-135m", "rows": rows, "words": words, "megabytes": mb,
                      "submitted_s": submitted, "first_rows_computed_s": computing})
