"""Routing a DAG run's tasks among several workers: one home per run, stable when workers come and
go, spilling only past both thresholds, failing over in hash order."""

from quail.worker.routing import hash_order, route

WORKERS = [f"grpc://gpu{i}:8815" for i in range(4)]
RUNS = [f"dag\x1fscheduled__{i}" for i in range(2000)]
IDLE = dict.fromkeys(WORKERS, 0)


def test_every_task_of_a_run_goes_to_one_home_whatever_the_listing_order():
    for run in RUNS[:50]:
        first = route(WORKERS, run, IDLE)
        assert route(list(reversed(WORKERS)), run, IDLE) == first and not first.spilled
    homes = {route(WORKERS, run, IDLE).worker for run in RUNS}
    assert homes == set(WORKERS)


def test_adding_a_worker_moves_about_one_run_in_n():
    before = {run: route(WORKERS, run, IDLE).worker for run in RUNS}
    five = WORKERS + ["grpc://gpu4:8815"]
    after = {run: route(five, run, dict.fromkeys(five, 0)).worker for run in RUNS}
    moved = [run for run in RUNS if before[run] != after[run]]
    assert all(after[run] == "grpc://gpu4:8815" for run in moved)  # only to the new worker
    assert 0.15 < len(moved) / len(RUNS) < 0.25  # about 1/5


def test_a_home_spills_only_past_both_thresholds():
    run = RUNS[0]
    home, *others = hash_order(WORKERS, run)
    loads = dict.fromkeys(WORKERS, 100_000) | {home: 250_000}
    assert route(WORKERS, run, loads).worker == home  # 150,000 above: under the absolute threshold
    loads = dict.fromkeys(WORKERS, 400_000) | {home: 900_000}
    assert route(WORKERS, run, loads).worker == home  # 500,000 above, but not 4 times
    loads = dict.fromkeys(WORKERS, 50_000) | {home: 900_000, others[2]: 10_000}
    r = route(WORKERS, run, loads)
    assert r.spilled and r.worker == others[2] and r.home == home  # the least loaded


def test_a_home_that_does_not_answer_fails_over_in_hash_order():
    run = RUNS[1]
    order = hash_order(WORKERS, run)
    assert route(WORKERS, run, {w: 0 for w in order[1:]}).worker == order[1]
    assert route(WORKERS, run, {order[3]: 0}).worker == order[3]
    assert route(WORKERS, run, {}) is None
