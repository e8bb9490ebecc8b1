"""The answer store's cost per answer: inserts and lookups per second and bytes on disk, for the
embedded SQLite file (quail/store/sqlite.py) and PostgreSQL over loopback
(quail/store/postgres.py), with 1 and with 4 workers at once; for PostgreSQL, lookups at
several batch sizes (the keys of one statement); and, as the simplest alternative a user could
reach for, the standard library's dbm (one key-value file, one writer, no LRU, no sharing).

    python -m bench micro answer_store [--answers 200000] [--url postgresql+psycopg://...]

PostgreSQL: a throwaway cluster of the installed server binaries (bench/common/postgres.py), or --url.
"""

import dbm
import json
import multiprocessing
import random
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from bench.common.postgres import throwaway_cluster
from bench.common.results import parser, write_json
from quail.store import answer_key, open_store, postgres

WINDOW = 8192  # answers a run writes at a time
RESULTS: list[dict] = []


def items_of(n: int) -> list[tuple[bytes, list[float]]]:
    rng = random.Random(0)
    return [(answer_key("model:float32:cpu", "filter\x1fnone\x1f[1, 2, 3]", [i]), [rng.random()]) for i in range(n)]


def _work(location: str, what: str, part: list, batch: int, barrier: object, out: object) -> None:
    postgres.BATCH = batch
    store = open_store(location)  # its own connection, nothing found lately in its memory
    barrier.wait()
    if what == "put":
        for lo in range(0, len(part), WINDOW):
            store.put(part[lo: lo + WINDOW])
        out.put(len(part))
    else:
        out.put(sum(len(store.get(part[lo: lo + WINDOW], 1)) for lo in range(0, len(part), WINDOW)))
    store.close()


def timed(location: str, what: str, parts: list[list], batch: int = postgres.BATCH) -> tuple[float, int]:
    """Seconds for len(parts) processes to do `what` with their part at once, and what they found."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(len(parts) + 1), ctx.Queue()
    procs = [ctx.Process(target=_work, args=(location, what, p, batch, barrier, out)) for p in parts]
    for p in procs:
        p.start()
    barrier.wait()
    t = time.perf_counter()
    done = sum(out.get() for _ in procs)
    elapsed = time.perf_counter() - t
    for p in procs:
        p.join()
    return elapsed, done


def backend(name: str, location: str, n: int, workers: int) -> None:
    items = items_of(n)
    store = open_store(location)
    store.clear()
    put, _ = timed(location, "put", [items[i::workers] for i in range(workers)])
    keys = [k for k, _ in items]
    random.Random(1).shuffle(keys)
    get, found = timed(location, "get", [keys[i::workers] for i in range(workers)])
    report(name, n, workers, put, get, found, store.size())
    store.close()


def batches(location: str, n: int) -> None:
    keys = [k for k, _ in items_of(n)]
    random.Random(1).shuffle(keys)
    for batch in (500, 2000, 5000, 20000):
        get, found = timed(location, "get", [keys], batch)
        RESULTS.append({"store": "postgresql", "batch": batch, "found": found, "lookups_per_s": round(n / get)})
        print(json.dumps(RESULTS[-1]), flush=True)


def dbm_baseline(n: int) -> None:
    items = items_of(n)
    keys = [k for k, _ in items]
    random.Random(1).shuffle(keys)
    with tempfile.TemporaryDirectory() as d, dbm.open(str(Path(d) / "b"), "c") as db:
        t = time.perf_counter()
        for k, v in items:
            db[k] = json.dumps(v)
        put = time.perf_counter() - t
        t = time.perf_counter()
        found = sum(k in db and bool(db[k]) for k in keys)
        get = time.perf_counter() - t
        size = sum(p.stat().st_size for p in Path(d).glob("b*"))
        report(f"dbm ({dbm.whichdb(str(Path(d) / 'b'))})", n, 1, put, get, found, size)


def report(name: str, n: int, workers: int, put: float, get: float, found: int, size: int) -> None:
    RESULTS.append({"store": name, "answers": n, "workers": workers, "found": found, "inserts_per_s": round(n / put),
                    "lookups_per_s": round(n / get), "bytes_per_answer": round(size / n, 1)})
    print(json.dumps(RESULTS[-1]), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--answers", type=int, default=200_000)
    ap.add_argument("--url", help="a PostgreSQL store URL; default: a throwaway cluster")
    args = ap.parse_args(argv)
    RESULTS.clear()
    with tempfile.TemporaryDirectory() as d, (nullcontext(args.url) if args.url else throwaway_cluster()) as url:
        for workers in (1, 4):
            backend("sqlite (WAL)", str(Path(d) / "a.sqlite"), args.answers, workers)
            backend("postgresql (loopback)", url, args.answers, workers)
        batches(url, args.answers)
    dbm_baseline(args.answers)
    write_json(args, {"answers": args.answers, "window": WINDOW, "runs": RESULTS})
