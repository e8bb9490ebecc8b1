"""Planning time against the number of operators (the planner runs at every DAG parse):

    PYTHONPATH=engine:. .venv/bin/python bench/planning.py
"""

import statistics
import time

from quail.planner.plan import plan
from tests.planner.test_plan import chain_of_operators

for n in (10, 100, 1000):
    specs = chain_of_operators(n)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        plan(specs)
        times.append(time.perf_counter() - start)
    print(f"{n:>5} operators: {statistics.median(times) * 1e3:8.1f} ms (median of 5)")
