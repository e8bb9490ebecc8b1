"""Talks to a worker: submit a job (or re-attach to it), poll its status, fetch its answers."""

import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

import pyarrow as pa
import pyarrow.flight as flight

from quail.errors import QuailError
from quail.planner.plan import OperatorPlan, Plan
from quail.reuse import Reuse
from quail.specs import OperatorSpec
from quail.trust import owned_file
from quail.worker.jobs import ENDED, Origin, Span, Submission
from quail.worker.locations import check_location, is_tls, socket_path, tls_options
from quail.worker.protocol import BUSY, MODEL_CHANGED, UNKNOWN_JOB, documents_table, submit_command
from quail.worker.routing import Route
from quail.worker.tokens import CHALLENGE, proof

DEFAULT_TIMEOUT = 30.0
SUBMIT_BATCH_ROWS = 512

T = TypeVar("T")


class WorkerLost(QuailError):
    """The worker does not answer, no longer knows the job (it was restarted), or is stopping because
    its model's files changed: a task can start or wait for a worker and resubmit, where any other
    error is final."""


class WorkerBusy(QuailError):
    """The worker holds as many unfinished jobs of the submitter's DAG as it takes (--max-queued):
    submitting again once some end works."""


BUSY_TIMEOUT = 600.0  # seconds a submission waits for a busy worker to take it
# what a reply must hold, of these types, to be a Quail worker's
Shape = dict[str, type | tuple[type, ...]]
INFO: Shape = {"model": str, "identity": str, "current": bool, "arena_pages": int, "free_pages": int,
               "retained_pages": int, "queued_tokens": int, "active_jobs": int, "device": str, "dtype": str,
               "weights_loaded": bool, "attention": str, "attention_why": str, "max_batch_tokens": int,
               "page_size": int, "cascade_models": list, "memory": (dict, type(None))}
STATUS: Shape = {"job": str, "state": str, "rows": int, "rows_done": int, "tokens_computed": int, "origin": dict}
LISTING: Shape = {"ref": str, "state": str, "rows": int, "rows_done": int, "origin": dict}


def backoff(seconds: float) -> Iterator[float]:
    """The waits of a bounded backoff from now: 1 s, doubling up to 15 s, while the next wait ends
    within `seconds`."""
    deadline = time.monotonic() + seconds

    def waits() -> Iterator[float]:
        delay = 1.0
        while time.monotonic() + delay <= deadline:
            yield delay
            delay = min(2 * delay, 15.0)

    return waits()


class WorkerClient:
    """:param timeout: seconds one call may take (the `timeout` setting: a quail connection's extra)
    :param tls_ca: for a grpc+tls:// worker, a PEM file of the certificate authority that signed its
        certificate (default: the system's); the worker must present a certificate for the host the
        location names, so that whoever else holds the port never sees the token or the documents"""

    def __init__(self, location: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 tls_ca: str | None = None):
        if (sock := socket_path(check_location(location))) is not None:
            owned_file(sock, kind="socket")  # another user's socket could be a fake worker, harvesting documents
        self.location, self.timeout, self.token = location, timeout, token
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        self.options = flight.FlightCallOptions(headers=headers, timeout=timeout)
        self.client = flight.FlightClient(location, **tls_options(location, tls_ca))
        self.proven = token is None
        self.proving = threading.Lock()
        self.route: Route | None = None  # how a task chose it among several (QuailHook.get_conn); None: it had one

    def _prove(self) -> None:
        """Asks the worker to prove it holds the token before the token or a document is sent: a
        squatter on a listed port, or a stale entry, cannot, and is a lost worker."""
        challenge = secrets.token_hex(16)
        options = flight.FlightCallOptions(headers=[(CHALLENGE.encode(), challenge.encode())], timeout=self.timeout)
        with self.proving:
            if self.proven:
                return
            # do_action, not list_actions: pyarrow turns a cancelled list_actions (a worker shutting
            # down) into a KeyboardInterrupt in the main thread
            results = self._call(lambda _: list(self.client.do_action(flight.Action("prove", b""), options=options)),
                                 proving=True)
            answer = results[0].body.to_pybytes() if len(results) == 1 else b""
            assert self.token is not None
            if not hmac.compare_digest(answer, proof(self.token, challenge).encode()):
                raise WorkerLost(f"what answers at {self.location} did not prove it holds the connection's token: "
                                 f"not this pool's Quail worker")
            self.proven = True

    def _call(self, fn: Callable[[flight.FlightCallOptions], T], proving: bool = False) -> T:
        """Runs fn(options), turning Flight's errors into ones that say what to do."""
        try:
            if not self.proven and not proving:
                self._prove()
            return fn(self.options)
        except flight.FlightUnauthenticatedError:
            if proving:  # a worker before proofs, or no Quail worker at all
                raise WorkerLost(f"what answers at {self.location} did not prove it holds the connection's token: "
                                 f"not this pool's Quail worker") from None
            raise QuailError(f"the Quail worker at {self.location} refused the token") from None
        except flight.FlightUnavailableError as e:
            if is_tls(self.location) and any(w in str(e).lower() for w in ("handshake", "ssl", "certificate")):
                raise QuailError(f"the Quail worker at {self.location} did not prove who it is (TLS: "
                                 f"{str(e).splitlines()[0]}); check that its certificate names that host and is "
                                 f"signed by the given tls_ca") from None
            raise WorkerLost(f"no Quail worker answers at {self.location}; start one with "
                             f"`quail worker serve --model MODEL` (docs/airflow.md)") from None
        except flight.FlightCancelledError:  # a worker shutting down cancels the calls it was serving
            raise WorkerLost(f"the Quail worker at {self.location} stopped while it answered") from None
        except flight.FlightTimedOutError:
            raise WorkerLost(f"the Quail worker at {self.location} did not answer within {self.timeout:.0f} s "
                             f"(the `timeout` setting, in the quail connection's extra)") from None
        except flight.FlightServerError as e:
            error = WorkerLost if e.extra_info in (UNKNOWN_JOB, MODEL_CHANGED) else \
                WorkerBusy if e.extra_info == BUSY else QuailError
            raise error(f"the Quail worker: {str(e).splitlines()[0].split('. Detail: ')[0]}") from None

    def _action(self, name: str, body: str = "") -> Any:
        action = flight.Action(name, body.encode())
        results = self._call(lambda options: list(self.client.do_action(action, options=options)))
        try:
            [result] = results
            return json.loads(result.body.to_pybytes())
        except ValueError:  # no single result, or no JSON
            raise WorkerLost(f"what answers at {self.location} replied to {name!r} as no Quail worker does") from None

    def _shaped(self, name: str, doc: Any, keys: Shape) -> Any:
        """`doc`, if it holds `keys` of their types: a reply of another shape is a lost worker, never
        a KeyError or a TypeError in the task."""
        if not isinstance(doc, dict) or any(not isinstance(doc.get(k), t) for k, t in keys.items()):
            raise WorkerLost(f"what answers at {self.location} replied to {name!r} as no Quail worker does")
        return doc

    def submit(self, origin: Origin, spec: OperatorSpec, op: OperatorPlan, reuse: Reuse,
               inputs: list[tuple[list[str], list[int]]], window: Span = Span(),
               plan: Plan | None = None, replaces: str | None = None, predict_only: bool = False) -> tuple[str, bool]:
        """Returns the job id, and whether it attached to a job this origin submitted before.
        `plan`: the whole plan `op` belongs to, for the predicted accounting; `replaces`: this
        origin's earlier job, cancelled if this one computes something else; `predict_only`: the
        job predicts its accounting (its status's `predicted`) and computes nothing. The documents
        travel in batches of SUBMIT_BATCH_ROWS."""
        table = documents_table(inputs)
        command = submit_command(Submission(origin, spec, op, reuse, window, plan, replaces, predict_only,
                                            self.route.routed if self.route else None))
        descriptor = flight.FlightDescriptor.for_command(command)

        def put(options: flight.FlightCallOptions) -> dict:
            writer, reader = self.client.do_put(descriptor, table.schema, options=options)
            with writer:
                writer.write_table(table, max_chunksize=SUBMIT_BATCH_ROWS)
                writer.done_writing()
                return json.loads(reader.read().to_pybytes())

        waits = backoff(BUSY_TIMEOUT)
        while True:
            try:
                reply = self._call(put)
                return reply["job"], reply["attached"]
            except WorkerBusy:
                if (wait := next(waits, None)) is None:
                    raise
                time.sleep(wait)

    def info(self) -> dict:
        return self._shaped("info", self._action("info"), INFO)

    @overload
    def status(self, job_id: str) -> dict: ...
    @overload
    def status(self) -> list[dict]: ...

    def status(self, job_id: str = "") -> dict | list[dict]:
        """One job's status, or, without an id, a listing of all jobs."""
        doc = self._action("status", job_id)
        if job_id:
            return self._shaped("status", doc, STATUS)
        if not isinstance(doc, list):
            raise WorkerLost(f"what answers at {self.location} replied to 'status' as no Quail worker does")
        return [self._shaped("status", d, LISTING) for d in doc]

    def cancel(self, job_id: str) -> dict:
        return self._action("cancel", job_id)

    def stop(self) -> int:
        """Asks a local worker to stop as SIGTERM would; returns its process id."""
        return int(self._action("stop")["pid"])

    def wait(self, job_id: str, poll: float = 0.5, on_progress: Callable[[dict], None] | None = None) -> dict:
        while True:
            status = self.status(job_id)
            if on_progress is not None:
                on_progress(status)
            if status["state"] in ENDED:
                return status
            time.sleep(poll)

    def fetch(self, job_id: str) -> pa.Table:
        ticket = flight.Ticket(job_id.encode())
        return self._call(lambda options: self.client.do_get(ticket, options=options).read_all())


def describe_load(info: dict) -> str:
    """A worker's `info` in one line: what it runs and how loaded it is."""
    return (f"{info['model']} on {info['device']}, {info['active_jobs']} job(s), {info['queued_tokens']:,} queued "
            f"tokens, {info['free_pages']:,}/{info['arena_pages']:,} pages free, {info['retained_pages']:,} retained"
            f"; answers in {info.get('answer_store') or 'no store'}"
            + (f" (not in use: {info['answer_store_unused']})" if info.get("answer_store_unused") else ""))
