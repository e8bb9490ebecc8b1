"""QuailHook: a client for the worker that a `quail` connection names, or for a local worker
started on demand when the connection has no host (the embedded default)."""

import threading

from airflow.exceptions import AirflowNotFoundException
from airflow.sdk import BaseHook

from quail.constants import DEFAULT_PORT
from quail.errors import QuailError
from quail.model.registry import DEFAULT_MODEL
from quail.pipeline.windows import check_count
from quail.worker.client import DEFAULT_TIMEOUT, WorkerClient, WorkerLost, describe_load
from quail.worker.local import ensure_local_worker
from quail.worker.locations import is_loopback, is_tls
from quail.worker.routing import placement, route
from quail.worker.tokens import read_token


class QuailHook(BaseHook):
    """A client for the worker that a `quail` connection names: its host (and port, default 8815)
    and token (the password; if empty, the one a worker on this machine wrote for this user); or
    several workers listed in the extras (`workers`), each task routed to its DAG run's worker; or,
    with no host, a local worker for the extras' model, dtype, device and arena pages, started on
    demand.

    With several workers, one task's windows run on several at once (`max_workers` caps how many).

    TLS: workers named `grpc+tls://HOST:PORT` (or a host with the extra `tls_ca`) are reached over
    TLS, their certificate checked against the extra `tls_ca` (a PEM file on the Airflow workers),
    else the system's authorities. Off loopback, TLS keeps whoever else holds a worker's port from
    receiving the token and the documents.

    Extras that bound the waiting: `timeout`, the seconds one call to a worker may take (default
    30); `worker_lost_timeout`, the seconds a task waits for a worker that died or stopped
    answering to come back (a local one is started again) before its try fails (default 600).
    `max_tokens`: the budget of the tasks whose operators set none (BaseLLMOperator).

    :param quail_conn_id: the connection; quail_default may be absent (the embedded default)
    """

    conn_name_attr = "quail_conn_id"
    default_conn_name = "quail_default"
    conn_type = "quail"
    hook_name = "Quail"

    def __init__(self, quail_conn_id: str = default_conn_name):
        super().__init__()
        self.quail_conn_id = quail_conn_id

    def _settings(self) -> tuple[str | None, int | None, str | None, dict]:
        try:
            conn = self.get_connection(self.quail_conn_id)
        except AirflowNotFoundException:
            if self.quail_conn_id != self.default_conn_name:
                raise
            return None, None, None, {}  # no quail_default: the embedded default on a local worker
        return conn.host, conn.port, conn.password, conn.extra_dejson

    def _remote(self) -> tuple[list[str], str | None, dict]:
        """The workers the connection names (none: a local worker on demand), its token and extras."""
        host, port, token, extra = self._settings()
        workers = list(extra.get("workers") or [])
        if not workers and host:
            scheme = "grpc+tls" if extra.get("tls_ca") else "grpc"
            workers = [host if "://" in host else f"{scheme}://{host}:{port or DEFAULT_PORT}"]
        return workers, token, extra

    def get_conn(self, dag: str = "", partition: int | None = None) -> WorkerClient:
        """The worker for a task of DAG `dag` and partition `partition` (its map index; None if it is
        not mapped): with several workers listed in the extras (`{"workers": ["grpc://h1:8815", ...]}`),
        the partition's home (quail.worker.routing); else the connection's one worker."""
        workers, token, extra = self._remote()
        timeout = self._seconds("timeout", DEFAULT_TIMEOUT, extra)
        if len(workers) > 1:
            return self._routed(placement(workers, dag, partition), token, timeout, extra)
        if workers:
            return _client(workers[0], token, timeout, extra)
        location, token = ensure_local_worker(extra.get("model") or DEFAULT_MODEL, extra.get("dtype") or "auto",
                                              extra.get("arena_pages"), extra.get("device") or "auto",
                                              say=self.log.info)
        return WorkerClient(location, token, timeout)

    def fan_out(self, home: WorkerClient, dag: str, partition: int | None, cap: int | None) -> "FanOut":
        """The workers one task's windows may run on at once: its home first, then the others of
        the connection that answer, in the partition's order, at most `cap` (by default the extra
        `max_workers`, else all of them). One: a connection of one worker, or a local one."""
        workers, token, extra = self._remote()
        if cap is None:
            cap = check_count(extra.get("max_workers"), f"connection {self.quail_conn_id!r}: the extra 'max_workers'")
        if len(workers) < 2 or cap == 1:
            return FanOut([home])
        timeout = self._seconds("timeout", DEFAULT_TIMEOUT, extra)
        answering = _loads([w for w in placement(workers, dag, partition) if w != home.location], token, extra)
        model = home.info()["identity"]  # windows of one task are one model's answers: bytes, dtype, threads
        others = []
        for w, info in answering.items():
            if isinstance(info, dict) and info["identity"] != model:
                self.log.info("the worker %s runs another model identity (%s) than the task's home (%s): it takes "
                              "none of this task's windows", w, info["identity"], model)
            elif isinstance(info, dict):
                others.append(_client(w, token, timeout, extra))
        return FanOut([home, *others][:cap])

    def _seconds(self, key: str, default: float, extra: dict | None = None) -> float:
        """An extra that is a number of seconds; `extra`: the extras already read, if they were."""
        value = (self._remote()[2] if extra is None else extra).get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise QuailError(f"connection {self.quail_conn_id!r}: the extra {key!r} must be a number of seconds "
                             f"above 0, not {value!r}")
        return float(value)

    @property
    def max_tokens(self) -> int | None:
        """The extra `max_tokens`: the tokens a task may compute, unless its operator says otherwise."""
        return check_count(self._remote()[2].get("max_tokens"),
                                f"connection {self.quail_conn_id!r}: the extra 'max_tokens'")

    @property
    def worker_lost_timeout(self) -> float:
        """The extra `worker_lost_timeout`: seconds a task waits for a lost worker to come back."""
        return self._seconds("worker_lost_timeout", 600.0)

    @property
    def answer_store(self) -> bool:
        """The connection's extra `answer_store`: false, and its tasks neither use nor keep stored answers."""
        value = self._remote()[2].get("answer_store", True)
        if not isinstance(value, bool):  # "false", 0 or null must not read as true
            raise QuailError(f"connection {self.quail_conn_id!r}: the extra 'answer_store' must be true or false, "
                             f"not {value!r}")
        return value

    def client_at(self, location: str) -> WorkerClient:
        """A client for one of the connection's workers (the one a task chose), with its token; with
        no password, the token a worker on this machine wrote for this user, if any."""
        _, _, token, extra = self._settings()
        return _client(location, token, self._seconds("timeout", DEFAULT_TIMEOUT, extra), extra)

    def loads(self) -> dict[str, dict | str]:
        """Every worker the connection names, with its `info` (model, device, queued tokens, active
        jobs, pages) or why it does not answer. Starts no local worker."""
        workers, token, extra = self._remote()
        return _loads(workers, token, extra)

    def test_connection(self) -> tuple[bool, str]:
        """The connection form's Test button: each worker's load, or why it does not answer."""
        loads = self.loads()
        if not loads:
            return True, "no host: a local worker is started on demand for the extras' model"
        lines = [f"{loc}: {info if isinstance(info, str) else describe_load(info)}" for loc, info in loads.items()]
        return all(not isinstance(info, str) for info in loads.values()), "; ".join(lines)

    def _routed(self, order: tuple[str, ...], token: str | None, timeout: float, extra: dict) -> WorkerClient:
        loads = {}
        for location, info in _loads(list(order), token, extra).items():
            if isinstance(info, str):
                self.log.warning("Quail worker %s does not answer (%s); passed over", location, info)
            else:
                loads[location] = info["queued_tokens"]
        chosen = route(order, loads)
        if chosen is None:
            raise WorkerLost(f"none of the connection's Quail workers answers: {', '.join(order)}")
        if chosen.routed != "home":
            self.log.warning("Quail worker %s: %s", chosen.worker, chosen.why)
        client = _client(chosen.worker, token, timeout, extra)
        client.route = chosen
        return client


class FanOut:
    """The workers one task's windows run on, window k on the k-th (modulo) of those not lost. A
    window whose worker is lost moves to the next of them that answers, so the lost worker's share
    spreads over the others, not all onto the task's home."""

    def __init__(self, clients: list[WorkerClient]):
        self.clients = clients
        self._lost: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.clients)

    def _live(self) -> list[WorkerClient]:
        return [c for c in self.clients if c.location not in self._lost]

    def for_window(self, k: int) -> WorkerClient:
        with self._lock:
            live = self._live() or self.clients
        return live[k % len(live)]

    def instead_of(self, lost: WorkerClient, k: int) -> WorkerClient | None:
        """Window k's worker now that `lost` does not answer: another of the fan-out that does, or
        None if none does (the caller then waits for the task's own worker)."""
        with self._lock:
            self._lost.add(lost.location)
        while True:
            with self._lock:
                live = self._live()
            if not live:
                return None
            client = live[k % len(live)]
            try:
                client.info()
                return client
            except QuailError:
                with self._lock:
                    self._lost.add(client.location)


def _loads(workers: list[str], token: str | None, extra: dict) -> dict[str, dict | str]:
    loads: dict[str, dict | str] = {}
    for location in workers:
        try:
            loads[location] = _client(location, token, DEFAULT_TIMEOUT, extra).info()
        except QuailError as e:
            loads[location] = str(e)
    return loads


def _client(location: str, token: str | None, timeout: float, extra: dict) -> WorkerClient:
    """A client for one of the connection's workers; over TLS, trusting the extra `tls_ca`. A worker
    reached in plaintext gets the token in the clear: refused where the connection asks for TLS (a
    `tls_ca`), and off this machine unless the extra `plaintext` says so."""
    if not is_tls(location):
        if extra.get("tls_ca"):
            raise QuailError(f"the connection gives a tls_ca, and its worker {location} is not grpc+tls://: the "
                             f"token would travel in plaintext; list it as grpc+tls://HOST:PORT")
        if not is_loopback(location) and extra.get("plaintext") is not True:
            raise QuailError(f"the worker {location} is off this machine and not grpc+tls://: the token would "
                             f"travel in plaintext; serve it with --tls-cert and list it as grpc+tls://, or set "
                             f"the connection's extra \"plaintext\": true on a network you trust")
    return WorkerClient(location, token or read_token(location), timeout,
                        extra.get("tls_ca") if is_tls(location) else None)
