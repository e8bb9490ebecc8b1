"""A worker's metrics in Prometheus' text format, served on a port of its own (`quail worker serve
--metrics-port`): what it computed and reused by mechanism, its jobs and how they were routed to it,
its arena, forward passes and answer store, and how long jobs waited and computed.

Counters move once per job, when it ends, by the job's own accounting (executor/stats.py), so that
a pool's counters add up to its tasks' stats exactly; what a scrape must see live (queues, pages,
passes, the store's calls) is read when Prometheus asks. Labels stay bounded: a DAG's id at most
(`by_dag`), never a run, row or document. The endpoint wants no token: it serves numbers and the
model's name only (docs/deploying.md, "Watching a pool")."""

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from quail.constants import MECHANISMS
from quail.store.base import Store
from quail.worker.routing import DIRECT

if TYPE_CHECKING:
    from quail.session import Session
    from quail.worker.jobs import Job

SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
STORE_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
RATE_WINDOW = 60.0  # seconds over which tokens_per_second averages


class Watched(Protocol):
    """What a scrape reads of its worker (worker/server.py's Worker)."""

    session: "Session"
    jobs: "dict[str, Job]"


class Rate:
    """Tokens computed over the last RATE_WINDOW seconds, per second: the one figure a dashboard
    wants live that a counter's rate() only gives a scrape interval late."""

    def __init__(self) -> None:
        self._seen: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def add(self, tokens: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._seen.append((now, tokens))
            self._forget(now)

    def per_second(self) -> float:
        now = time.monotonic()
        with self._lock:
            self._forget(now)
            return sum(t for _, t in self._seen) / RATE_WINDOW

    def _forget(self, now: float) -> None:
        while self._seen and self._seen[0][0] < now - RATE_WINDOW:
            self._seen.popleft()


class Metrics:
    """One worker's metrics, in a registry of its own (two workers in one process never mix)."""

    def __init__(self, by_dag: bool = True):
        self.by_dag = by_dag
        self.registry = CollectorRegistry()
        dag = ["dag"] if by_dag else []
        r = self.registry
        self.tokens_naive = Counter("quail_tokens_naive", "Tokens the jobs would compute with no reuse", dag,
                                    registry=r)
        self.tokens_computed = Counter("quail_tokens_computed", "Tokens computed (prompts and written tokens fed "
                                       "back)", dag, registry=r)
        self.tokens_reused = Counter("quail_tokens_reused", "Tokens not computed, by the mechanism that saved them "
                                     "(rewind, sharing, retention, store)", [*dag, "mechanism"], registry=r)
        self.tokens_generated = Counter("quail_tokens_generated", "Tokens written by extract and map", dag,
                                        registry=r)
        self.tokens_ahead = Counter("quail_tokens_computed_ahead", "Tokens computed for a DAG's later operators "
                                    "while their documents' KV was hot, into the answer store", dag, registry=r)
        self.rows = Counter("quail_rows", "Rows the jobs computed", dag, registry=r)
        self.jobs_submitted = Counter("quail_jobs_submitted", "Jobs submitted, by how the task chose this worker "
                                      "(home, spilled, failover; direct: a connection of one worker)",
                                      [*dag, "routed"], registry=r)
        self.jobs_ended = Counter("quail_jobs_ended", "Jobs ended, by state (done, failed, cancelled)",
                                  [*dag, "state"], registry=r)
        self.windows = Counter("quail_windows_computed", "Windows computed: jobs that computed their rows (a "
                               "prediction computes none)", dag, registry=r)
        self.queue_wait = Histogram("quail_job_queue_wait_seconds", "Seconds a job waited before it computed",
                                    dag, buckets=SECONDS, registry=r)
        self.compute_time = Histogram("quail_job_compute_seconds", "Seconds a job computed", dag, buckets=SECONDS,
                                      registry=r)
        self.store_seconds = Histogram("quail_store_call_seconds", "Seconds an answer-store call took",
                                       ["backend", "call"], buckets=STORE_SECONDS, registry=r)
        self.rate = Rate()
        self._server: WSGIServer | None = None
        self.port: int | None = None

    def _dag(self, dag_id: str) -> tuple[str, ...]:
        return (dag_id,) if self.by_dag else ()

    def watch(self, worker: Watched) -> None:
        """The worker's state, read at each scrape."""
        self.registry.register(_Live(worker, self))

    def submitted(self, job: "Job") -> None:
        self.jobs_submitted.labels(*self._dag(job.origin.dag_id), job.submission.routed or DIRECT).inc()

    def ended(self, job: "Job") -> None:
        """A job's accounting, added once as it ends (a done job's stats; a failed or cancelled one's
        counts only its end and times)."""
        dag = self._dag(job.origin.dag_id)
        self.jobs_ended.labels(*dag, str(job.state)).inc()
        if job.started is not None:
            self.queue_wait.labels(*dag).observe(job.queued_seconds)
            self.compute_time.labels(*dag).observe((job.finished or time.time()) - job.started)
        s = job.stats
        if s is None:
            return
        self.tokens_naive.labels(*dag).inc(s["tokens_naive"])
        self.tokens_computed.labels(*dag).inc(s["tokens_computed"])
        self.tokens_generated.labels(*dag).inc(s["tokens_generated"])
        for mechanism in MECHANISMS:
            self.tokens_reused.labels(*dag, mechanism).inc(s["tokens_reused"][mechanism])
        self.tokens_ahead.labels(*dag).inc(sum(seen["tokens_computed"] for seen in job.ahead.values()))
        self.rows.labels(*dag).inc(job.rows)
        self.windows.labels(*dag).inc()

    def metered(self, store: Store | None) -> Store | None:
        return None if store is None else Metered(store, self)

    def serve(self, port: int, host: str, tls: tuple[str, str] | None = None) -> None:
        """Serves /metrics on host:port, over TLS with the worker's certificate and key files when
        it has them."""
        cert, key = tls or (None, None)
        server, _ = start_http_server(port, host, registry=self.registry, certfile=cert, keyfile=key)
        self._server, self.port = server, server.server_port  # the port given, or the one chosen for 0

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class Metered:
    """An answer store whose calls are counted and timed (the Store protocol, store/base.py)."""

    def __init__(self, store: Store, metrics: Metrics):
        self.store = store
        self.backend = store.backend
        self.lookups = self.hits = self.writes = 0
        self._seconds = metrics.store_seconds

    def get(self, keys: list[bytes], width: int, touch: bool = True) -> dict[bytes, list]:
        start = time.perf_counter()
        found = self.store.get(keys, width, touch)
        self._seconds.labels(self.backend, "get").observe(time.perf_counter() - start)
        self.lookups += len(keys)
        self.hits += len(found)
        return found

    def put(self, items: Iterable[tuple[bytes, list]]) -> None:
        items = list(items)
        start = time.perf_counter()
        self.store.put(items)
        self._seconds.labels(self.backend, "put").observe(time.perf_counter() - start)
        self.writes += len(items)

    def __getattr__(self, name: str):  # path, writable, unused, size, stats, clear, close, errors, rejected
        return getattr(self.store, name)


class _Live(Collector):
    def __init__(self, worker: Watched, metrics: Metrics):
        self.worker, self.metrics = worker, metrics

    def collect(self) -> Iterator[Metric]:
        w = self.worker
        session, engine = w.session, w.session.engine
        jobs = list(w.jobs.values())
        queued = GaugeMetricFamily("quail_jobs_unfinished", "Jobs not ended, by state", labels=["state"])
        for state in ("queued", "running"):
            queued.add_metric([state], sum(j.state == state for j in jobs))
        yield queued
        yield GaugeMetricFamily("quail_queued_tokens", "Document tokens of unfinished jobs not computed yet "
                                "(what routing weighs a worker by)", value=sum(j.queued_tokens for j in jobs))
        yield GaugeMetricFamily("quail_arena_pages", "The KV arena's pages", value=engine.settings.arena_pages)
        yield GaugeMetricFamily("quail_arena_pages_used", "Pages holding KV (computing or retained)",
                                value=engine.settings.arena_pages - engine.free_pages)
        yield GaugeMetricFamily("quail_arena_pages_retained", "Pages of KV kept for a later operator",
                                value=engine.pool.pages)
        yield GaugeMetricFamily("quail_arena_pages_free", "Free pages", value=engine.free_pages)
        scheduler = engine.scheduler
        yield CounterMetricFamily("quail_forward_passes", "Forward passes", value=scheduler.forward_passes)
        yield CounterMetricFamily("quail_batch_tokens", "Tokens the forward passes computed, all jobs batched",
                                  value=scheduler.batch_tokens)
        yield GaugeMetricFamily("quail_tokens_per_second", f"Tokens computed per second over the last "
                                f"{RATE_WINDOW:.0f} s", value=self.metrics.rate.per_second())
        yield GaugeMetricFamily("quail_weights_loaded", "1 once the model's weights are read (at the first job "
                                "that computes)", value=float(engine.model.weights_loaded))
        info = InfoMetricFamily("quail_worker", "The worker's model, dtype, attention and device")
        info.add_metric([], {"model": session.loaded.name,
                             "dtype": str(engine.model.dtype).removeprefix("torch."),
                             "attention": engine.model.attention_name, "device": str(engine.model.device)})
        yield info
        yield from self._store(session.store)

    @staticmethod
    def _store(store: Store | None) -> Iterator[Metric]:
        if not isinstance(store, Metered):
            return
        labels = ["backend"]
        for name, text, value in (
                ("lookups", "Answers looked up", store.lookups),
                ("hits", "Answers found", store.hits),
                ("misses", "Answers looked up and not found", store.lookups - store.hits),
                ("writes", "Answers stored", store.writes),
                ("errors", "Calls that failed (the run went on without the store)", store.errors)):
            family = CounterMetricFamily(f"quail_store_{name}", text, labels=labels)
            family.add_metric([store.backend], value)
            yield family
        rejected = CounterMetricFamily("quail_store_rejected", "Stored values refused: unsigned (planted, or "
                                       "another key's) or damaged", labels=[*labels, "reason"])
        rejected.add_metric([store.backend, "unsigned"], store.rejected.unsigned)
        rejected.add_metric([store.backend, "damaged"], store.rejected.damaged)
        yield rejected
        up = GaugeMetricFamily("quail_store_up", "1 while the answer store is used", labels=labels)
        up.add_metric([store.backend], float(store.unused is None))
        yield up
