"""A Quail task's figures through Airflow's own metrics: StatsD, Datadog or OpenTelemetry,
whichever the deployment's [metrics] section turns on (docs/deploying.md, "Watching a pool").

Names carry what a plain StatsD keeps (it drops tags): `quail.tokens_reused.<mechanism>`,
`quail.routed.<home|spilled|failover|direct>`; tags carry the DAG, the task and the worker for the
backends that keep them. A metric never fails a task."""

import logging

from airflow.configuration import conf
from airflow.sdk._shared.observability.metrics import stats as _stats
from airflow.sdk.observability import stats
from airflow.sdk.observability.metrics import stats_utils

from quail.constants import MECHANISMS

log = logging.getLogger(__name__)


def _initialized() -> None:
    """A task's process has Stats set up by Airflow's task runner; `dag.test()` and a task run in
    the triggerer's or a test's process do not: there it is set up from the same configuration."""
    if _stats._factory is None:
        stats.initialize(factory=stats_utils.get_stats_factory(),
                         export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True))


def emit(dag_id: str, task_id: str, manifest: dict) -> None:
    """Sends a finished try's manifest (airflow_quail.runs) as counters and one timer."""
    try:
        _initialized()
        routing = manifest["routing"]
        tags = {"dag_id": dag_id, "task_id": task_id, "worker": routing["worker"]}
        s = manifest["stats"]
        for name in ("tokens_computed", "tokens_naive", "tokens_generated"):
            stats.incr(f"quail.{name}", s[name], tags=tags)
        stats.incr("quail.tokens_saved", s["tokens_naive"] - s["tokens_computed"], tags=tags)
        for mechanism in MECHANISMS:
            stats.incr(f"quail.tokens_reused.{mechanism}", s["tokens_reused"][mechanism], tags=tags)
        stats.incr("quail.rows_in", manifest["rows_in"], tags=tags)
        stats.incr("quail.rows_out", manifest["rows_out"], tags=tags)
        stats.incr(f"quail.routed.{routing['routed']}", tags=tags)
        stats.timing("quail.worker_wait", manifest["waited_seconds"] * 1000.0, tags=tags)
    except Exception as e:  # a metrics backend that fails (a bad host, a full buffer) loses metrics, not the task
        log.warning("Quail's task metrics were not sent: %s: %s", type(e).__name__, e)
