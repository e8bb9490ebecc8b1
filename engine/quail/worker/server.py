"""The worker: one process per device that owns the model, the KV arena, the retention pool and
the observed counts (cost/observed.py), and computes jobs that operators submit over Arrow Flight.

It listens on loopback or a Unix socket unless told otherwise, and always wants a token
(worker/tokens.py). A job's id is its capability: only the task that submitted it (or one that
submits the very same content) learns it, and fetching, cancelling or reading a job's full status
takes it; the list of all jobs names them by a digest of the id. Up to
`max_jobs` jobs run at once, each on its own thread, and the engine batches them into the same
forward passes; KV retained by one task is there for the next. Results stay until fetched and then
for `ttl` seconds.
"""

import functools
import hmac
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.flight as flight

from quail.constants import DEFAULT_MAX_QUEUED
from quail.cost.observed import SelectivityCounts, WrittenCounts
from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.kinds import KINDS
from quail.planner.predict import Prediction
from quail.runtime.compute import compute, compute_window, parts, predict
from quail.runtime.observed import Observed
from quail.session import Session
from quail.trust import owned_file, private_folder
from quail.worker.ahead import consumer_input, consumers_ahead
from quail.worker.jobs import Job, JobState
from quail.worker.locations import socket_path
from quail.worker.metrics import Metrics
from quail.worker.protocol import (
    BUSY,
    MODEL_CHANGED,
    UNKNOWN_JOB,
    content_digest,
    documents_digest,
    parse_submit,
    split_documents,
)
from quail.worker.tokens import CHALLENGE, proof

MAX_ACTION_BYTES = 256  # a job id


class Cancelled(QuailError):
    """A job cancelled while it ran: its rows in flight finished, nothing more was started."""


OFFERED = "the Quail worker takes jobs by do_put and answers do_get and do_action (info, status, cancel, stop)"
NOT_OFFERED = {flight.FlightMethod.LIST_FLIGHTS: "list_flights", flight.FlightMethod.GET_FLIGHT_INFO: "get_flight_info",
               flight.FlightMethod.GET_SCHEMA: "get_schema", flight.FlightMethod.DO_EXCHANGE: "do_exchange"}


class _TokenCheck(flight.ServerMiddlewareFactory):
    def __init__(self, token: str):
        self.token = token
        self.expected = f"Bearer {token}".encode()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[str]]) -> flight.ServerMiddleware | None:
        challenge = headers.get(CHALLENGE, [])
        if info.method == flight.FlightMethod.DO_ACTION and len(challenge) == 1 and len(challenge[0]) <= 128:
            return _Proof(proof(self.token, challenge[0]))  # no token needed: do_action answers "prove" alone
        sent = headers.get("authorization", [])
        if len(sent) != 1 or not hmac.compare_digest(sent[0].encode(), self.expected):
            raise flight.FlightUnauthenticatedError("the Quail worker wants a bearer token (the connection's password)")
        if info.method in NOT_OFFERED:  # refused here: pyarrow's handlers of these reply with a traceback
            raise flight.FlightServerError(f"{NOT_OFFERED[info.method]} is not offered: {OFFERED}")
        return None


class _Proof(flight.ServerMiddleware):
    """A call without the token that asks the worker to prove it holds it: "prove" is all it may do."""

    def __init__(self, value: str):
        self.value = value


F = TypeVar("F", bound=Callable[..., Any])


def message_only(call: F) -> F:
    """A Flight call whose errors reach the client as their message alone: a traceback would tell
    whoever holds the token the server's code and paths. An error nobody foresaw is printed here,
    with its traceback, for the worker's owner."""
    @functools.wraps(call)
    def replying(*args: Any) -> Any:
        try:
            return call(*args)
        except flight.FlightError:
            raise
        except QuailError as e:
            raise flight.FlightServerError(str(e)) from None
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            raise flight.FlightServerError(f"the worker failed: {type(e).__name__}: {e}") from None

    return replying  # type: ignore[return-value]


def claim_location(location: str) -> Path | None:
    """Checks that no live worker holds `location`, and returns its Unix socket path (None for a TCP
    port). A stale socket of this user's, from a worker that died, is removed; anything else at the
    path (a file, a folder, a link, another user's socket), or a socket in a folder that other users
    can write, is refused, never removed. gRPC would silently take over a live one's path."""
    path = socket_path(location)
    if path is None:
        host, port = urlsplit(location).hostname, urlsplit(location).port
        with socket.socket(socket.AF_INET6 if ":" in (host or "") else socket.AF_INET) as probe:
            probe.settimeout(2.0)
            if probe.connect_ex((host, port)) == 0:
                raise QuailError(f"something already listens on {host}:{port}; stop it or choose another port")
        return None
    private_folder(path.parent)
    if not owned_file(path, kind="socket"):
        return path
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # nobody listens: a worker that died
    else:
        raise QuailError(f"a worker already listens on {path}; stop it first (`quail worker stop` for the "
                         f"local ones) or choose another socket")
    finally:
        probe.close()
    return path


# a consumer computed ahead, reported
AHEAD = ("rows", "tokens_computed", "document_tokens_computed", "retention", "tokens_generated")


class Worker(flight.FlightServerBase):
    def __init__(self, session: Session, location: str, token: str, ttl: float = 3600.0,
                 idle_timeout: float | None = None, max_jobs: int = 8, tls: tuple[bytes, bytes] | None = None,
                 max_queued: int = DEFAULT_MAX_QUEUED, metrics: Metrics | None = None):
        if not token:
            raise QuailError("a worker needs a token (quail.worker.tokens)")
        sock = claim_location(location)
        old_umask = os.umask(0o177)  # the socket is created 0600 whatever the caller's umask
        try:
            super().__init__(location, middleware={"token": _TokenCheck(token)},
                             tls_certificates=[flight.CertKeyPair(*tls)] if tls else [])
        except (pa.ArrowException, OSError) as e:
            raise QuailError(f"the worker cannot listen on {location}: {str(e).splitlines()[0]}") from None
        finally:
            os.umask(old_umask)
        if sock is not None:
            os.chmod(sock, 0o600)
        self.socket = sock
        self.session = session
        self.model = session.loaded.identity
        self.stale = False  # its model's files changed since they were loaded: it stops
        self.ttl = ttl
        self.jobs: dict[str, Job] = {}
        self.by_origin: dict[str, list[str]] = {}  # an origin's jobs: a resubmission with other content adds one
        self.lock = threading.Lock()
        self.runners = ThreadPoolExecutor(max_jobs, thread_name_prefix="quail-job")
        self.max_queued = max_queued
        self.selectivity = SelectivityCounts()
        self.written = WrittenCounts()
        self.last_call = time.time()
        self.metrics = metrics
        if metrics is not None:
            session.store = metrics.metered(session.store)
            metrics.watch(self)
        if idle_timeout:
            threading.Thread(target=self._exit_when_idle, args=(idle_timeout,), name="quail-idle", daemon=True).start()

    def _exit_when_idle(self, seconds: float) -> None:
        """A worker started on demand goes away after `seconds` without calls or work."""
        while True:
            time.sleep(min(seconds, 5.0))
            with self.lock:
                busy = any(not j.ended for j in self.jobs.values())
            if not busy and time.time() - self.last_call > seconds:
                self.shutdown()
                return

    def drain(self) -> None:
        """After shutdown (SIGTERM): what is queued is cancelled, what runs stops after its rows in
        flight. A task whose job this cancels resubmits it to the next worker, which recomputes."""
        with self.lock:
            for job in self.jobs.values():
                self._cancel(job)
        self.runners.shutdown(wait=True)
        if self.metrics is not None:
            self.metrics.close()

    @staticmethod
    def _cancel(job: Job) -> None:
        """Under the lock: a queued job ends now; a running one when its progress is next reported."""
        if job.state == JobState.QUEUED:
            job.state, job.finished = JobState.CANCELLED, time.time()
            job.release_inputs()
        job.cancel_requested = not job.ended

    def _current(self) -> bool:
        """Whether the model's files are still those it loaded. Once they change, its answers are
        the old weights': it takes no more jobs and stops (after its rows in flight), and its tasks
        resubmit to a new worker, a local one started anew, a served one restarted by its supervisor."""
        if not self.stale and self.session.changed():
            self.stale = True
            print("quail worker: the model's files changed since they were loaded; stopping", file=sys.stderr,
                  flush=True)
            threading.Thread(target=self.shutdown, name="quail-stale", daemon=True).start()
        return not self.stale

    # Flight calls
    @message_only
    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader, writer: flight.FlightMetadataWriter) -> None:
        self.last_call = time.time()
        if not self._current():
            raise flight.FlightServerError("the model's files changed since this worker loaded them; it is stopping",
                                           extra_info=MODEL_CHANGED)
        submission = parse_submit(descriptor.command)  # a QuailError is the client's message (message_only)
        inputs = split_documents(reader.read_all(), KINDS[submission.spec.kind].arity)
        documents = documents_digest(inputs)
        content = content_digest(submission, self.model, documents)
        key = submission.origin.key
        with self.lock:  # answered at once: the documents are tokenized by the job, not here
            self._expire()
            same = [self.jobs[i] for i in self.by_origin.get(key, []) if i in self.jobs]
            live = (j for j in same if j.content == content and j.state not in (JobState.FAILED, JobState.CANCELLED))
            job = next(live, None)
            attached = job is not None
            if job is None:
                self._admit(submission.origin.dag_id)
                for earlier in same:  # only its submitter knows its id (worker/protocol.py)
                    if earlier.id == submission.replaces:
                        self._cancel(earlier)
                job = Job(submission, inputs, content, documents, self.model)
                self.jobs[job.id] = job
                self.by_origin.setdefault(key, []).append(job.id)
                self.runners.submit(self._run, job)
                if self.metrics is not None:
                    self.metrics.submitted(job)
        writer.write(pa.py_buffer(json.dumps({"job": job.id, "attached": attached}).encode()))

    def _admit(self, dag_id: str) -> None:
        """Under the lock: one DAG (a run's tasks, or one client flooding) holds at most `max_queued`
        unfinished jobs, and all of them together four times that, so no submitter queues hours of
        work ahead of everyone else. The client waits and submits again (worker/client.py)."""
        unfinished = [j for j in self.jobs.values() if not j.ended]
        mine = sum(j.submission.origin.dag_id == dag_id for j in unfinished)
        if mine >= self.max_queued or len(unfinished) >= 4 * self.max_queued:
            whose = f"of DAG {dag_id!r} " if mine >= self.max_queued else ""
            raise flight.FlightServerError(f"the worker holds {max(mine, len(unfinished))} unfinished jobs {whose}"
                                           f"(at most {self.max_queued} a DAG and {4 * self.max_queued} in all, "
                                           f"max_queued); submit again once some end", extra_info=BUSY)

    @message_only
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.RecordBatchStream:
        self.last_call = time.time()
        job = self._job(ticket.ticket.decode("utf-8", "replace"))
        if job.state != JobState.DONE:
            raise flight.FlightServerError(f"job {job.id} is {job.state}{': ' + job.error if job.error else ''}")
        return flight.RecordBatchStream(job.results)

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [("info", "the model, its device and dtype, the arena's pages (total, free, retained), and the "
                         "cascades' larger models it has loaded"),
                ("status", "one job's status (body: its id) or a listing of all jobs without their ids"),
                ("cancel", "cancel a job: a queued one at once, a running one after its rows in flight")]

    @message_only
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> list[flight.Result]:
        self.last_call = time.time()
        if action.body.size > MAX_ACTION_BYTES:
            raise flight.FlightServerError(f"an action body of {action.body.size:,} bytes: at most {MAX_ACTION_BYTES}")
        body = action.body.to_pybytes().decode("utf-8", "replace")
        doc: dict | list[dict]
        if isinstance(unproven := context.get_middleware("token"), _Proof):
            if action.type != "prove":
                raise flight.FlightUnauthenticatedError("the Quail worker wants a bearer token (the connection's "
                                                        "password)")
            return [flight.Result(unproven.value.encode())]
        if action.type == "info":
            doc = self.info()
        elif action.type == "status":
            with self.lock:
                self._expire()
                doc = self._job(body).status() if body else [j.listing() for j in self.jobs.values()]
        elif action.type == "cancel":
            job = self._job(body)
            with self.lock:
                self._cancel(job)
            doc = job.status()
        elif action.type == "stop":
            # a local worker's owner stops it by its socket and token when its pid file is gone; the
            # call returns before the server stops (shutdown waits for calls in flight)
            if self.socket is None:
                raise flight.FlightServerError("stop is for a local worker on a Unix socket; stop a TCP worker's "
                                               "process where it runs")
            doc = {"pid": os.getpid()}
            threading.Thread(target=self.shutdown, name="quail-stop", daemon=True).start()
        else:
            raise flight.FlightServerError(f"unknown action {action.type!r}")
        return [flight.Result(json.dumps(doc).encode())]  # built here, so that message_only sees its errors

    def info(self) -> dict:
        engine = self.session.engine
        return {"model": self.session.loaded.name, "identity": self.model, "current": self._current(),
                "dtype": str(engine.model.dtype).removeprefix("torch."), "dtype_why": self.session.loaded.dtype_why,
                "attention": engine.model.attention_name, "attention_why": engine.model.attention_why,
                "device": str(engine.model.device), "weights_loaded": engine.model.weights_loaded,
                "arena_pages": engine.settings.arena_pages,
                "free_pages": engine.free_pages, "retained_pages": engine.pool.pages,
                "max_batch_tokens": engine.settings.max_batch_tokens, "page_size": engine.settings.page_size,
                "queued_tokens": sum(j.queued_tokens for j in list(self.jobs.values())),
                "active_jobs": sum(not j.ended for j in list(self.jobs.values())),
                "memory": engine.settings.memory.to_dict() if engine.settings.memory else None,
                "cascade_models": sorted(self.session.cascade_models),
                "answer_store": None if self.session.store is None else str(self.session.store.path),
                "answer_store_unused": None if self.session.store is None else self.session.store.unused,
                "pid": os.getpid()}

    def _ahead(self, job: Job, consumers: list, results: pa.Table, inputs: list) -> None:
        """The DAG's consumers of these rows, computed now while their KV is hot (worker/ahead.py)."""
        sub = job.submission
        for c in consumers:
            texts, rows = consumer_input(sub.spec, results, inputs)
            try:
                done = compute(self.session, c, sub.whole_plan[c.name], sub.reuse, [(texts, rows)],
                               scope=sub.origin.scope)[1] if texts else None
                seen = job.ahead.setdefault(c.name, dict.fromkeys(AHEAD, 0))
                seen["rows"] += len(texts)
                if done is not None:
                    seen["tokens_computed"] += done.tokens_computed
                    seen["document_tokens_computed"] += done.document_tokens_computed
                    seen["retention"] += done.tokens_reused["retention"]
                    seen["tokens_generated"] += done.tokens_generated
            except Exception as e:  # computing ahead only saves work: it never fails the producer's job
                print(f"quail worker: computing {c.name} ahead failed: {e}", file=sys.stderr, flush=True)

    def _parts(self, job: Job, consumers: list) -> list[tuple[int, int]]:
        """The job's rows in parts computed one after another: one part, or, where consumers are
        computed ahead, parts whose documents to compute fill half the retention pool
        (compute.parts), so that each consumer runs on a part while its KV is in the arena,
        whatever the window's size. A cascade (its band is chosen on the whole window) and a row
        limit keep one part."""
        spec = job.spec
        if not consumers or spec.cascade is not None or spec.limit is not None:
            return [(0, len(job.docs))]
        return parts(self.session, spec, job.docs, job.submission.reuse.store)

    # the job loop
    def _job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise flight.FlightServerError(f"no job {job_id!r} on this worker (finished results expire after "
                                           f"{self.ttl:.0f} s)", extra_info=UNKNOWN_JOB)
        return job

    def _expire(self) -> None:
        now = time.time()
        for job in [j for j in self.jobs.values() if j.finished and now - j.finished > self.ttl]:
            del self.jobs[job.id]
            ids = self.by_origin.get(job.origin.key, [])
            if job.id in ids:
                ids.remove(job.id)
            if not ids:
                self.by_origin.pop(job.origin.key, None)

    def _run(self, job: Job) -> None:
        with self.lock:
            if job.state != JobState.QUEUED:  # cancelled while it waited
                self._ended(job)
                return
            job.state, job.started = JobState.RUNNING, time.time()

        def progress(rows: int, tokens: int) -> None:
            job.rows_done += rows
            job.tokens_computed += tokens
            if self.metrics is not None:
                self.metrics.rate.add(tokens)
            if job.cancel_requested:
                raise Cancelled(f"job {job.id} was cancelled")

        try:
            sub = job.submission
            job.tokenized(self.session.layout.documents(job.inputs[0][0]))
            partners = job.inputs[1][0] if len(job.inputs) > 1 else []
            # nothing is computed ahead where there is nowhere to keep it (#48 18)
            use_store = sub.reuse.store and self.session.store is not None and self.session.store.unused is None
            ahead = consumers_ahead(sub.whole_plan, sub.spec) if use_store else []
            cuts = self._parts(job, ahead)
            # before computing: what the answer store holds now, not what the job adds to it
            predicted = Prediction()
            for k, (lo, hi) in enumerate(cuts):
                predicted.add(predict(self.session, sub.whole_plan, sub.spec, job.docs[lo:hi], partners, reached=True,
                                      use_store=sub.reuse.store, probed=k > 0))
            if sub.predict_only:
                job.predicted, job.state = predicted.rounded(), JobState.DONE
                return
            tables: list[pa.Table] = []
            stats: Stats | None = None
            for lo, hi in cuts:
                inputs = [(job.inputs[0][0][lo:hi], job.inputs[0][1][lo:hi]), *job.inputs[1:]]
                done = compute_window(self.session, sub.whole_plan, sub.spec, sub.op, sub.reuse, inputs,
                                      progress=progress, scope=sub.origin.scope)
                predicted.add(done.escalated)
                self._ahead(job, ahead, done.results, inputs)
                tables.append(done.results)
                stats = done.stats if stats is None else stats.merge(done.stats)
            results = pa.concat_tables(tables)
            assert stats is not None  # a job has one part at least
            job.predicted = predicted.rounded()
            observed = Observed(job.spec, self.session.loaded.tokenizer.encode_batch)
            observed.add(job.spec, results)
            with self.lock:
                observed.record(self.selectivity, self.written)
            job.results, job.stats, job.state = results, stats.to_dict(), JobState.DONE
        except Cancelled:
            job.state = JobState.CANCELLED
        except QuailError as e:
            job.error, job.state = str(e), JobState.FAILED
        except Exception as e:  # an engine bug: report it to the task instead of killing the worker
            job.error, job.state = f"{type(e).__name__}: {e}", JobState.FAILED
        finally:
            if job.window.last and not job.submission.predict_only:
                self.session.engine.consumed(job.origin.scope + job.spec.name)
            job.release_inputs()
            job.finished = time.time()
            self._ended(job)

    def _ended(self, job: Job) -> None:
        if self.metrics is not None:
            self.metrics.ended(job)
