"""QuailHook: a client for the worker that a `quail` connection names, or for a local worker
started on demand when the connection has no host (the embedded default)."""

from airflow.exceptions import AirflowNotFoundException
from airflow.sdk import BaseHook

from quail.constants import DEFAULT_PORT
from quail.errors import QuailError
from quail.model.registry import DEFAULT_MODEL
from quail.worker.client import WorkerClient
from quail.worker.local import ensure_local_worker
from quail.worker.routing import route
from quail.worker.tokens import read_token


class QuailHook(BaseHook):
    """A client for the worker that a `quail` connection names: its host (and port, default 8815)
    and token (the password; if empty, the one a worker on this machine wrote for this user); or
    several workers listed in the extras (`workers`), each task routed to its DAG run's worker; or,
    with no host, a local worker for the extras' model, dtype, device and arena pages, started on
    demand.

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

    def get_conn(self, run: str | None = None) -> WorkerClient:
        """The worker for a task of DAG run `run` (its routing key): with several workers listed in
        the extras (`{"workers": ["grpc://h1:8815", ...]}`), the run's home (quail.worker.routing);
        else the connection's one worker."""
        host, port, token, extra = self._settings()
        workers = extra.get("workers")
        if workers:
            return self._routed(list(workers), run or "", token)
        if host:
            location = host if "://" in host else f"grpc://{host}:{port or DEFAULT_PORT}"
            return _client(location, token)
        location, token = ensure_local_worker(extra.get("model") or DEFAULT_MODEL, extra.get("dtype") or "auto",
                                              extra.get("arena_pages"), extra.get("device") or "auto")
        return WorkerClient(location, token)

    def client_at(self, location: str) -> WorkerClient:
        """A client for one of the connection's workers (the one a task chose), with its token; with
        no password, the token a worker on this machine wrote for this user, if any."""
        _, _, token, _ = self._settings()
        return _client(location, token)

    def _routed(self, workers: list[str], run: str, token: str | None) -> WorkerClient:
        loads = {}
        for location in workers:
            try:
                loads[location] = _client(location, token).info()["queued_tokens"]
            except QuailError as e:
                self.log.warning("Quail worker %s does not answer (%s); passed over", location, e)
        chosen = route(workers, run, loads)
        if chosen is None:
            raise QuailError(f"none of the connection's Quail workers answers: {', '.join(workers)}")
        if chosen.spilled:
            self.log.warning("the run's Quail worker %s is far busier (%d queued tokens) than %s (%d): this task "
                             "goes there and loses the run's retained KV", chosen.home, loads[chosen.home],
                             chosen.worker, loads[chosen.worker])
        elif chosen.worker != chosen.order[0]:
            self.log.warning("the run's Quail worker %s does not answer: failing over to %s", chosen.order[0],
                             chosen.worker)
        return _client(chosen.worker, token)


def _client(location: str, token: str | None) -> WorkerClient:
    return WorkerClient(location, token or read_token(location))
