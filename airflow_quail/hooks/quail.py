"""QuailHook: a client for the worker that a `quail` connection names, or for a local worker
started on demand when the connection has no host (the embedded default)."""

from airflow.exceptions import AirflowNotFoundException
from airflow.sdk import BaseHook

from quail.constants import DEFAULT_PORT
from quail.model.registry import DEFAULT_MODEL
from quail.worker.client import WorkerClient
from quail.worker.local import ensure_local_worker
from quail.worker.tokens import read_token


class QuailHook(BaseHook):
    """A client for the worker that a `quail` connection names: its host (and port, default 8815)
    and token (the password; if empty, the one a worker on this machine wrote for this user), or,
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

    def get_conn(self) -> WorkerClient:
        host, port, token, extra = self._settings()
        if host:
            location = host if "://" in host else f"grpc://{host}:{port or DEFAULT_PORT}"
            # no password: the token a worker on this machine wrote for this user, if any
            return WorkerClient(location, token or read_token(location))
        location, token = ensure_local_worker(extra.get("model") or DEFAULT_MODEL, extra.get("dtype") or "auto",
                                              extra.get("arena_pages"), extra.get("device") or "auto")
        return WorkerClient(location, token)
