"""QuailHook: a remote worker from a connection's host, an unknown connection, and the local worker:
started on demand, shared, and started again after it died."""

import json
import os
import signal
import time

import pytest

from airflow_quail.hooks.quail import QuailHook
from quail.planner.plan import plan
from quail.reuse import Reuse
from quail.specs import OperatorSpec
from quail.worker.jobs import Origin
from quail.worker.liveness import holder

TEXTS = ["The striker scored twice.", "Rates rose again.", "The keeper saved a penalty."]
SPECS = [OperatorSpec("sport", "filter", ("t",), ("text",), ("Is this about sport?",), threshold=0.0),
         OperatorSpec("kind", "classify", ("sport",), ("text",), ("What kind?",), ("match", "money"))]


def _run(client, task, run_id):
    spec = SPECS[[s.name for s in SPECS].index(task)]
    job, _ = client.submit(Origin("d", task, run_id), spec, plan(SPECS)[task], Reuse(),
                           [(TEXTS, list(range(len(TEXTS))))])
    status = client.wait(job, poll=0.1)
    assert status["state"] == "done", status
    return client.fetch(job).to_pylist(), status["stats"]


def test_a_worker_killed_between_tasks_is_started_again_and_recomputes(local_default):
    client = QuailHook().get_conn()
    assert QuailHook().get_conn().location == client.location  # one worker for every task
    _run(client, "sport", "r1")
    _, kept = _run(client, "kind", "r1")
    assert kept["tokens_reused"]["retention"] > 0
    _run(client, "sport", "r2")
    [pid] = local_default.glob("*.pid")
    os.kill(int(pid.read_text()), signal.SIGKILL)  # dies with r2's retained KV
    deadline = time.monotonic() + 30
    while holder(pid) is not None:  # gone once no process holds its pid file's lock
        assert time.monotonic() < deadline, "the killed worker did not exit"
        time.sleep(0.02)
    client = QuailHook().get_conn()  # a new worker
    answers, stats = _run(client, "kind", "r2")
    assert stats["tokens_reused"]["retention"] == 0  # recomputed
    first, _ = _run(client, "kind", "r3")
    assert [r["label"] for r in answers] == [r["label"] for r in first]


def test_a_connection_with_a_host_names_a_remote_worker(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_GPU", json.dumps({"conn_type": "quail", "host": "10.0.0.5", "port": 9000,
                                                             "password": "tok", "extra": {"plaintext": True}}))
    client = QuailHook("quail_gpu").get_conn()
    assert client.location == "grpc://10.0.0.5:9000"


@pytest.mark.parametrize("extra, says", [
    ({}, "is off this machine and not grpc\\+tls://"),
    ({"tls_ca": "/etc/ca.pem", "workers": ["grpc+tls://10.0.0.6:9000", "grpc://10.0.0.5:9000"]},
     "gives a tls_ca, and its worker grpc://10.0.0.5:9000 is not grpc\\+tls://"),
])
def test_a_token_is_never_sent_in_plaintext_unless_the_connection_says_so(monkeypatch, extra, says):
    """#48 9: a connection with tls_ca whose workers list a grpc:// entry talked to it in plaintext,
    token included, silently; off loopback a plaintext worker is refused unless asked for."""
    from quail.errors import QuailError

    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_GPU", json.dumps({"conn_type": "quail", "host": "10.0.0.5", "port": 9000,
                                                             "password": "tok", "extra": extra}))
    hook = QuailHook("quail_gpu")
    with pytest.raises(QuailError, match=says):
        if "workers" in extra:
            hook.client_at("grpc://10.0.0.5:9000")
        else:
            hook.get_conn()


@pytest.mark.parametrize("value", ["false", 0, None, "no"])
def test_an_answer_store_extra_that_is_not_a_boolean_is_refused(monkeypatch, value):
    """"false", 0, "no" or null once read as true: the tasks used the store they were told not to."""
    from quail.errors import QuailError

    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_X", json.dumps({"conn_type": "quail", "host": "127.0.0.1",
                                                           "extra": {"answer_store": value}}))
    with pytest.raises(QuailError, match="the extra 'answer_store' must be true or false"):
        QuailHook("quail_x").answer_store
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_X", json.dumps({"conn_type": "quail", "host": "127.0.0.1",
                                                           "extra": {"answer_store": False}}))
    assert QuailHook("quail_x").answer_store is False


def test_an_unknown_connection_is_an_error():
    from airflow.exceptions import AirflowNotFoundException

    with pytest.raises(AirflowNotFoundException):
        QuailHook("no_such_connection").get_conn()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_the_connections_device_reaches_the_local_worker(local_default, monkeypatch):
    from quail.errors import QuailError

    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_DEFAULT", json.dumps(
        {"conn_type": "quail", "extra": {"model": "smollm2-135m", "device": "cuda"}}))
    with pytest.raises(QuailError, match="exited with code 2"):
        QuailHook().get_conn()
    [log] = local_default.glob("*.log")
    assert "quail: error: --device cuda: torch" in log.read_text()  # the worker was asked for CUDA


def test_a_connection_listing_two_workers_keeps_each_partition_on_one_and_fails_over(smollm2, tmp_path,
                                                                                     monkeypatch):
    from quail.executor.engine import PhysicalSettings
    from quail.session import Session
    from quail.worker.server import Worker

    locations = [f"grpc+unix://{tmp_path}/w{i}.sock" for i in range(2)]
    servers = {loc: Worker(Session(smollm2, PhysicalSettings(256, 512)), loc, token="tok") for loc in locations}
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_POOL", json.dumps({"conn_type": "quail", "password": "tok",
                                                              "extra": {"workers": locations}}))
    try:
        hook = QuailHook("quail_pool")
        ok, said = hook.test_connection()  # the connection form's Test button: each worker's load
        assert ok and all(f"{loc}: smollm2-135m on cpu, 0 job(s), 0 queued tokens" in said for loc in locations)
        homes = {dag: hook.get_conn(dag).location for dag in (f"d{i}" for i in range(24))}
        assert set(homes.values()) == set(locations)  # the DAGs spread over both
        mapped = [hook.get_conn("d0", p).location for p in range(4)]
        assert sorted(mapped) == sorted(locations * 2)  # a mapped operator's 4 partitions: 2 on each
        first = hook.get_conn("d0")
        assert first.location == homes["d0"]
        _run(first, "sport", "r0")
        _, kept = _run(hook.get_conn("d0"), "kind", "r0")  # the DAG's next task: the same worker
        assert kept["tokens_reused"]["retention"] > 0
        servers.pop(homes["d0"]).shutdown()  # the partition's worker goes away
        ok, said = hook.test_connection()
        assert not ok and f"{homes['d0']}: no Quail worker answers" in said
        other = hook.get_conn("d0")
        assert other.location != homes["d0"]  # failed over to the next in the key's order
        answers, stats = _run(other, "kind", "r0")
        assert stats["tokens_reused"]["retention"] == 0 and len(answers) == len(TEXTS)  # recomputed there
    finally:
        for server in servers.values():
            server.shutdown()


def test_a_fan_out_takes_only_workers_of_the_homes_model_identity(monkeypatch):
    """#48 10: a pool mixing fp32 and bf16 workers of one model failed every multi-window task with
    "the worker's model changed", which no retry escapes."""
    from airflow_quail.hooks import quail as hook_module

    workers = ["grpc://127.0.0.1:9001", "grpc://127.0.0.1:9002", "grpc://127.0.0.1:9003"]
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_POOL", json.dumps({"conn_type": "quail", "password": "tok",
                                                              "extra": {"workers": workers}}))
    identity = {workers[0]: "m:float32:cpu", workers[1]: "m:bfloat16:cpu:threads2:x", workers[2]: "m:float32:cpu"}
    monkeypatch.setattr(hook_module, "_loads", lambda ws, token, extra: {w: {"identity": identity[w]} for w in ws})

    class Home:
        location = workers[0]

        def info(self):
            return {"identity": identity[workers[0]]}

    fan = QuailHook("quail_pool").fan_out(Home(), "dag", None, None)
    assert [c.location for c in fan.clients[1:]] == [workers[2]]
