"""A worker's /metrics, scraped over HTTP and parsed with prometheus_client's own parser: the
counters equal the jobs' accounting exactly, mechanism by mechanism."""

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from quail.constants import MECHANISMS
from quail.executor.engine import PhysicalSettings
from quail.planner.plan import plan
from quail.reuse import Reuse
from quail.session import Session
from quail.specs import OperatorSpec
from quail.store.sqlite import SqliteStore
from quail.worker.client import WorkerClient
from quail.worker.jobs import Origin
from quail.worker.metrics import Metrics
from quail.worker.routing import Route
from quail.worker.server import Worker

TEXTS = ["The striker scored twice in the derby.", "Rates rose again.", "The keeper saved a penalty.",
         "A new phone chip.", "The striker scored twice in the derby."]
SPECS = [OperatorSpec("sport", "filter", ("news",), ("text",), ("Is this about sport?",), threshold=0.0),
         OperatorSpec("kind", "classify", ("sport",), ("text",), ("What kind?",), ("match", "money"))]
INPUTS = [(TEXTS, list(range(len(TEXTS))))]


def scrape(port: int) -> dict[str, dict[tuple, float]]:
    """Each sample by name, keyed by its labels' values in order."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for key, v in samples.get(name, {}).items() if set(labels.items()) <= set(key))


@pytest.fixture
def served(smollm2, tmp_path):
    def start(by_dag: bool = True) -> tuple[Worker, WorkerClient]:
        session = Session(smollm2, PhysicalSettings(arena_pages=256, max_batch_tokens=512))
        session.store = SqliteStore(tmp_path / f"answers-{len(started)}.db")
        metrics = Metrics(by_dag=by_dag)
        metrics.serve(0, "127.0.0.1")
        location = f"grpc+unix://{tmp_path}/w{len(started)}.sock"
        worker = Worker(session, location, token="s3cret", metrics=metrics)
        started.append(worker)
        return worker, WorkerClient(location, token="s3cret")

    started: list[Worker] = []
    yield start
    for worker in started:
        worker.shutdown()
        worker.drain()


def test_counters_equal_the_jobs_accounting(served):
    worker, client = served()
    p = plan(SPECS)
    client.route = Route("w1", "w0", ("w0", "w1"))  # a task spilled off its busier home
    statuses = []
    for run in ("r1", "r2"):  # the second run finds every answer stored
        for spec in SPECS:  # the classify reuses the KV the filter retained for it
            job, _ = client.submit(Origin("news", spec.name, run), spec, p[spec.name], Reuse(), INPUTS)
            statuses.append(client.wait(job, poll=0.05))
        client.route = None
    assert [s["state"] for s in statuses] == ["done"] * 4
    stats = [s["stats"] for s in statuses]
    assert sum(s["tokens_reused"]["retention"] for s in stats) > 0
    assert sum(s["tokens_reused"]["store"] for s in stats) > 0
    m = scrape(worker.metrics.port)
    for name in ("tokens_naive", "tokens_computed", "tokens_generated"):
        assert total(m, f"quail_{name}_total", dag="news") == sum(s[name] for s in stats), name
    for mechanism in MECHANISMS:
        assert total(m, "quail_tokens_reused_total", dag="news", mechanism=mechanism) == \
            sum(s["tokens_reused"][mechanism] for s in stats), mechanism
    assert total(m, "quail_tokens_computed_total") + total(m, "quail_tokens_reused_total") == \
        total(m, "quail_tokens_naive_total")
    assert total(m, "quail_rows_total") == 4 * len(TEXTS)
    assert total(m, "quail_jobs_submitted_total", routed="spilled") == 2
    assert total(m, "quail_jobs_submitted_total", routed="direct") == 2
    assert total(m, "quail_jobs_ended_total", state="done") == total(m, "quail_windows_computed_total") == 4
    assert total(m, "quail_job_compute_seconds_count") == 4
    assert total(m, "quail_job_queue_wait_seconds_count") == 4
    # the passes the engine ran, and what they computed: the jobs' computed tokens, batched
    engine = worker.session.engine
    assert total(m, "quail_forward_passes_total") == engine.scheduler.forward_passes > 0
    assert total(m, "quail_batch_tokens_total") == sum(s["tokens_computed"] for s in stats)
    assert total(m, "quail_arena_pages") == 256
    assert total(m, "quail_arena_pages_free") + total(m, "quail_arena_pages_used") == 256
    assert total(m, "quail_jobs_unfinished") == 0 and total(m, "quail_queued_tokens") == 0
    # the store: every answer of the second run found, each run's misses written
    store = worker.session.store
    assert total(m, "quail_store_lookups_total", backend="sqlite") == store.lookups > 0
    assert total(m, "quail_store_hits_total") + total(m, "quail_store_misses_total") == store.lookups
    assert total(m, "quail_store_hits_total") == store.hits > 0
    assert total(m, "quail_store_writes_total") == store.writes > 0
    assert total(m, "quail_store_errors_total") == 0 and total(m, "quail_store_up") == 1
    assert total(m, "quail_store_call_seconds_count", call="get") > 0
    info = next(k for k in m["quail_worker_info"])
    assert ("model", "smollm2-135m") in info and ("device", "cpu") in info
    assert total(m, "quail_tokens_per_second") > 0  # tokens computed within the last minute


def test_a_failed_job_counts_its_end_and_no_tokens(served, monkeypatch):
    worker, client = served(by_dag=False)
    runner = worker.session.engine.scheduler.runner

    def lost(chunks):
        raise RuntimeError("device lost")

    monkeypatch.setattr(runner, "run", lost)
    job, _ = client.submit(Origin("news", "sport", "r1"), SPECS[0], plan(SPECS)["sport"], Reuse(), INPUTS)
    assert client.wait(job, poll=0.05)["state"] == "failed"
    m = scrape(worker.metrics.port)
    assert total(m, "quail_jobs_ended_total", state="failed") == 1
    assert total(m, "quail_tokens_computed_total") == 0
    assert all(("dag", "news") not in key for samples in m.values() for key in samples)  # labels off: no DAG


def served_names(metrics: Metrics) -> set[str]:
    """Every series name the registry serves, a labelled family's even before it has a sample."""
    names = set()
    for family in metrics.registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "info": ("_info",)}
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
    return names


def test_the_dashboard_and_the_alerts_ask_only_for_served_metrics(served):
    """docker/grafana/quail.json's panels and docker/prometheus/alerts.yml's rules, each query's
    metric names against what a worker serves."""
    import json
    import re
    from pathlib import Path

    import yaml

    worker, _ = served()
    names = served_names(worker.metrics)
    docker = Path(__file__).resolve().parents[2] / "docker"
    dashboard = json.loads((docker / "grafana" / "quail.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(dashboard["panels"]) >= 10 and all(panel["targets"] for panel in dashboard["panels"])
    rules = yaml.safe_load((docker / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]
    assert len(rules) == 3
    for query in queries + [rule["expr"] for rule in rules]:
        asked = set(re.findall(r"\bquail_[a-z_]+", query))
        assert asked and asked <= names, (query, asked - names)
    # the throughput, reuse, arena, store, queue wait and routing panels the issue names
    for metric in ("quail_tokens_per_second", "quail_tokens_reused_total", "quail_arena_pages_used",
                   "quail_store_hits_total", "quail_job_queue_wait_seconds_bucket", "quail_jobs_submitted_total"):
        assert any(metric in q for q in queries), metric
    scraped = yaml.safe_load((docker / "prometheus" / "prometheus.yml").read_text())
    assert {"quail-worker", "airflow"} == {job["job_name"] for job in scraped["scrape_configs"]}


def test_metrics_follow_the_workers_tls(tmp_path):
    """A worker with a certificate serves its metrics over HTTPS with it: a client that trusts its
    authority reads them; plain HTTP gets no metrics."""
    import ssl
    import urllib.error

    from cryptography.hazmat.primitives import serialization

    from tests.worker.test_tls import _authority, _leaf

    ca_key, ca = _authority("metrics test CA")
    cert, key = _leaf(ca_key, ca)
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    metrics = Metrics()
    metrics.serve(0, "127.0.0.1", (str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")))
    try:
        trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with urllib.request.urlopen(f"https://127.0.0.1:{metrics.port}/metrics", context=trusted, timeout=10) as r:
            assert r.status == 200 and b"quail_tokens_computed_total" in r.read()
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=10).read()
    finally:
        metrics.close()
