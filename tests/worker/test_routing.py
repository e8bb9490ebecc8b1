"""Routing tasks among several workers by their DAG and partition: a stable home per key whatever
the run, one DAG's partitions spread over the pool, stable when workers come and go, spilling only
past both thresholds, failing over in the key's order."""

from collections import Counter

from quail.worker.routing import hash_order, placement, route

WORKERS = [f"grpc://gpu{i}:8815" for i in range(4)]
DAGS = [f"dag_{i}" for i in range(500)]
IDLE = dict.fromkeys(WORKERS, 0)


def home(workers, dag, partition=None) -> str:
    return route(placement(workers, dag, partition), dict.fromkeys(workers, 0)).worker


def test_every_run_of_a_partition_goes_to_one_home_whatever_the_listing_order():
    for dag in DAGS[:50]:
        for partition in (None, 0, 3):
            first = route(placement(WORKERS, dag, partition), IDLE)
            assert route(placement(list(reversed(WORKERS)), dag, partition), IDLE) == first and not first.spilled
    assert {home(WORKERS, dag) for dag in DAGS} == set(WORKERS)


def test_a_mapped_operators_partitions_spread_over_the_pool():
    for dag in DAGS[:100]:
        assert Counter(home(WORKERS[:2], dag, p) for p in range(4)) == Counter({WORKERS[0]: 2, WORKERS[1]: 2})
        per = Counter(home(WORKERS, dag, p) for p in range(10))
        assert max(per.values()) == 3 and len(per) == 4  # ceil(10 / 4)
        # a consumer of partition p routes by the same key: it lands where its producer did, though
        # the producer's work now loads that worker (below the spill thresholds), and though the
        # consumer's task lists the pool in another order
        for p in range(10):
            producer = route(placement(WORKERS, dag, p), IDLE).worker
            busy = IDLE | {producer: 150_000}
            assert route(placement(WORKERS[::-1], dag, p), busy).worker == producer


def test_adding_a_worker_moves_about_one_key_in_n():
    keys = [(dag, p) for dag in DAGS for p in (None, 0, 1)]
    before = {k: home(WORKERS, *k) for k in keys}
    five = WORKERS + ["grpc://gpu4:8815"]
    after = {k: home(five, *k) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert sum(after[k] == "grpc://gpu4:8815" for k in moved) / len(moved) > 0.8  # mostly to the new worker
    assert 0.15 < len(moved) / len(keys) < 0.3  # about 1/5


def test_a_home_spills_only_past_both_thresholds():
    order = hash_order(WORKERS, "dag_0")
    home, *others = order
    loads = dict.fromkeys(WORKERS, 100_000) | {home: 250_000}
    assert route(order, loads).worker == home  # 150,000 above: under the absolute threshold
    loads = dict.fromkeys(WORKERS, 400_000) | {home: 900_000}
    assert route(order, loads).worker == home  # 500,000 above, but not 4 times
    loads = dict.fromkeys(WORKERS, 50_000) | {home: 900_000, others[2]: 10_000}
    r = route(order, loads)
    assert r.spilled and r.worker == others[2] and r.home == home  # the least loaded
    assert r.routed == "spilled" and "held 900,000 queued tokens" in r.why


def test_a_home_that_does_not_answer_fails_over_in_the_keys_order():
    order = placement(WORKERS, "dag_1", 2)
    moved = route(order, {w: 0 for w in order[1:]})
    assert moved.worker == order[1] and moved.routed == "failover" and f"{order[0]} did not answer" in moved.why
    assert route(order, {w: 0 for w in order}).routed == "home"
    assert route(order, {order[3]: 0}).worker == order[3]
    assert route(order, {}) is None
