"""A pool of workers on paper: how the routing (quail/worker/routing.py) spreads partitions, how
many move when the pool changes, and what the answer store finds on the days after the first,
shared by the pool or kept per worker. Pure: no model, no processes.

    python -m bench scale pool_sim [--workers 64] [--dags 1000] [--partitions 8] [--days 30]

Each day every partition of every DAG runs once; 1% of its rows changed since the day before. A
worker is lost every `--churn` days and replaced by a new one (a new name, an empty store of its
own), as a rescheduled pod with a fresh volume is. A row's answer is found if the store its task
sees holds it: the shared store holds every row answered the day before; a worker's own holds the
rows its tasks answered, on that worker, while it lived.
"""

import json
from collections import Counter

from bench.common.results import parser, write_json
from quail.worker.routing import placement


def homes(workers: list[str], dags: int, partitions: int) -> dict[tuple[str, int], str]:
    return {(f"dag_{d}", p): placement(workers, f"dag_{d}", p)[0] for d in range(dags) for p in range(partitions)}


def load(assigned: dict) -> tuple[float, int, float]:
    per = Counter(assigned.values())
    mean = len(assigned) / len(per)
    return max(per.values()) / mean, max(per.values()), mean


def window_load(workers: list[str], dags: int, partitions: int, windows: int, cap: int) -> float:
    """Max over mean windows per worker when each partition's `windows` windows fan out as a task's
    do (airflow_quail FanOut): window k on the k-th (modulo) of its home and the next `cap` - 1 workers
    in the partition's order."""
    per: Counter = Counter()
    for d in range(dags):
        for p in range(partitions):
            fan = placement(workers, f"dag_{d}", p)[:cap]
            per.update(fan[k % len(fan)] for k in range(windows))
    return max(per.values()) / (sum(per.values()) / len(workers))


def moved(before: dict, after: dict) -> float:
    return sum(before[k] != after[k] for k in before) / len(before)


def hit_rates(workers: list[str], dags: int, partitions: int, days: int, churn: int, changed: float) -> dict:
    """Day 2 onward: the share of rows answered from the store, shared and per worker."""
    pool, fresh = list(workers), 0
    seen: dict[str, set] = {w: set() for w in pool}  # the partitions each worker's own store holds
    shared = per_worker = 0.0
    for day in range(days):
        if churn and day and day % churn == 0:  # a worker lost, a new one in its place
            lost = pool[(day // churn * 7) % len(pool)]
            pool[pool.index(lost)] = f"new_{fresh}"
            seen.pop(lost)
            seen[f"new_{fresh}"] = set()
            fresh += 1
        assigned = homes(pool, dags, partitions)
        if day:
            shared += 1 - changed
            per_worker += sum(k in seen[w] for k, w in assigned.items()) / len(assigned) * (1 - changed)
        for k, w in assigned.items():
            seen[w].add(k)
    return {"shared": round(shared / (days - 1), 4), "per_worker": round(per_worker / (days - 1), 4)}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--dags", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--churn", type=int, default=3, help="a worker is replaced every CHURN days (0: never)")
    ap.add_argument("--windows", type=int, default=16, help="windows per partition, for the fan-out's load")
    args = ap.parse_args(argv)
    workers = [f"w{i}" for i in range(args.workers)]
    base = homes(workers, args.dags, args.partitions)
    ratio, most, mean = load(base)
    removed = homes(workers[:17] + workers[18:], args.dags, args.partitions)
    added = homes(workers + [f"w{args.workers}"], args.dags, args.partitions)
    figures = {
        "workers": args.workers, "dags": args.dags, "partitions": args.partitions,
        "load_max_over_mean": round(ratio, 3), "load_max": most, "load_mean": mean,
        "window_load_max_over_mean": {cap: round(window_load(workers, args.dags, args.partitions, args.windows, cap), 3)
                                      for cap in (2, 4, args.workers)},
        "moved_when_one_removed": round(moved(base, removed), 4),
        "moved_when_one_added": round(moved(base, added), 4), "target_moved": round(1 / args.workers + 0.01, 4),
        "store_hit_rate_day2_on": hit_rates(workers, args.dags, args.partitions, args.days, args.churn, 0.01),
        "store_hit_rate_day2_on_stable_pool": hit_rates(workers, args.dags, args.partitions, args.days, 0, 0.01),
    }
    print(json.dumps(figures, indent=1))
    write_json(args, figures)
