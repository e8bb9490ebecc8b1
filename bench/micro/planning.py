"""Planning time against the number of operators (the planner runs at every DAG parse): a chain of
filters, classifies and joins, each reading the one before, median of 5.

    python -m bench micro planning [--operators 10 100 1000]
"""

import statistics
import time

from bench.common.results import parser, write_json
from quail.planner.plan import plan
from quail.specs import OperatorSpec


def chain_of_operators(n: int) -> list[OperatorSpec]:
    """n operators, each reading the one before: filters, classifies and joins in turn."""
    specs = [OperatorSpec("f0", "filter", ("t",), ("text",), ("Q?",))]
    for i in range(1, n):
        kind = ("filter", "classify", "join")[i % 3]
        specs.append(OperatorSpec(f"op{i}", kind, (specs[-1].name,) + (("u",) if kind == "join" else ()),
                                  ("text",) + (("x",) if kind == "join" else ()), ("Q?",),
                                  ("a", "b") if kind == "classify" else ()))
    return specs


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--operators", type=int, nargs="+", default=[10, 100, 1000])
    args = ap.parse_args(argv)
    runs = []
    for n in args.operators:
        specs = chain_of_operators(n)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            plan(specs)
            times.append(time.perf_counter() - start)
        runs.append({"operators": n, "median_ms": statistics.median(times) * 1e3, "times_s": times})
        print(f"{n:>5} operators: {runs[-1]['median_ms']:8.1f} ms (median of 5)", flush=True)
    write_json(args, {"runs": runs})
