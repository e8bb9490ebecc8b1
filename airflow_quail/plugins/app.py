"""The Quail page's FastAPI app, mounted at /quail on the api-server. Every route requires the auth
manager's user (Airflow mounts plugin apps with no authentication of their own). Data comes from
the workers' status and the Quail tasks' XCom manifests, read through Airflow's own models: no
second database."""

import asyncio
from typing import TYPE_CHECKING, Annotated, Literal

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_view
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field, StrictBool, StrictStr, ValidationError

from airflow_quail.plugins import views
from quail.worker.routing import ROUTES, Routed

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

app = FastAPI(title="Quail", dependencies=[Depends(requires_access_view(AccessView.PLUGINS))])


# a count the page can chart: a task's tokens are far below it, and a number past it (10^400) broke the page
Count = Annotated[int, Field(strict=True, ge=0, le=10**15)]


Share = Annotated[float, Field(strict=True, ge=0, le=1)]


class _Blocking(BaseModel):
    """A blocked join's pairs and recall (Stats.blocking)."""

    mode: StrictStr
    pairs: Count
    asked: Count
    recall_lower: Share | None = None
    recall_estimate: Share | None = None
    target: Share | None = None
    delta: Share | None = None


class _Counts(BaseModel):
    tokens_computed: Count
    tokens_naive: Count
    tokens_reused: dict[str, Count]
    tokens_generated: Count = 0
    blocking: _Blocking | None = None


class _Retain(BaseModel):
    consumers: list[StrictStr]


class _Operator(BaseModel):
    rewind: StrictBool = False
    sharing: StrictBool = False
    retain: _Retain | None = None


class _Plan(BaseModel):
    operator: _Operator | None = None


class _Routing(BaseModel):
    routed: Literal[Routed, "direct"]  # worker/routing.py's ROUTES
    worker: StrictStr
    why: StrictStr = ""


class _Manifest(BaseModel):
    """What the page reads of a Quail task's XCom manifest; another task's value of a like shape is
    not one."""

    target: StrictStr
    rows_in: Count
    rows_out: Count
    stats: _Counts
    predicted: _Counts | None = None
    plan: _Plan | None = None
    worker: StrictStr | None = None
    windows: Count = 1
    workers: dict[str, Count] | None = None
    routing: _Routing | None = None  # none before #52


def is_manifest(value: object) -> bool:
    try:
        _Manifest.model_validate(value)
    except ValidationError:
        return False
    return True


def _workers() -> list[dict]:
    from quail.errors import QuailError
    from quail.worker.client import WorkerClient
    from quail.worker.local import local_workers

    out = []
    for location, token in local_workers():
        client = WorkerClient(location, token, timeout=5)
        try:
            out.append({"location": location, "info": client.info(), "jobs": client.status()})
        except QuailError:
            continue  # went away between the two calls
    return out


def _manifests(session: "Session", dag_id: str | None = None, run_id: str | None = None, limit: int = 2000) -> list:
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    query = select(XComModel).where(XComModel.key == "return_value")
    if dag_id is not None:
        query = query.where(XComModel.dag_id == dag_id, XComModel.run_id == run_id)
    rows = session.scalars(query.order_by(XComModel.timestamp.desc()).limit(limit))
    out = []
    for x in rows:
        value = XComModel.deserialize_value(x)
        if is_manifest(value):
            out.append((x.dag_id, x.run_id, x.task_id, x.map_index, _current(value)))
    return out


def _current(manifest: dict) -> dict:
    """A manifest under today's names: an older Quail (#49) wrote the mechanisms "prefix" and
    "answers", and its plan entry's "prefix_sharing"."""
    from quail.constants import mechanisms_of

    out = dict(manifest)
    for key in ("stats", "predicted"):
        if out.get(key) is not None:
            out[key] = out[key] | {"tokens_reused": mechanisms_of(out[key]["tokens_reused"])}
    op = (out.get("plan") or {}).get("operator")
    if op is not None and "prefix_sharing" in op:
        op = {("sharing" if k == "prefix_sharing" else k): v for k, v in op.items()}
        out["plan"] = out["plan"] | {"operator": op}
    return out


def run_tasks(session: "Session", dag_id: str, run_id: str) -> dict[str, dict]:
    found = reversed(_manifests(session, dag_id, run_id))  # in the order the tasks finished
    return {task if index < 0 else f"{task}[{index}]": m for _, _, task, index, m in found}


def recent_runs(session: "Session", limit: int = 20) -> list[dict]:
    runs: dict[tuple[str, str], dict] = {}
    for dag_id, run_id, _, _, m in _manifests(session):
        r = runs.setdefault((dag_id, run_id), {"dag_id": dag_id, "run_id": run_id, "tasks": 0,
                                                "tokens_computed": 0, "tokens_naive": 0})
        r["tasks"] += 1
        r["tokens_computed"] += m["stats"]["tokens_computed"]
        r["tokens_naive"] += m["stats"]["tokens_naive"]
    return list(runs.values())[:limit]


def routing_by_dag(session: "Session") -> dict[str, dict[str, int]]:
    """Each DAG's recent Quail tasks by how they came to their worker: at their partition's home,
    spilled off a far busier one, failed over, or direct (a connection of one worker)."""
    out: dict[str, dict[str, int]] = {}
    for dag_id, _, _, _, m in _manifests(session):
        if m.get("routing"):
            counts = out.setdefault(dag_id, dict.fromkeys(ROUTES, 0))
            counts[m["routing"]["routed"]] += 1
    return out


@app.get("/api/workers")
async def api_workers() -> list[dict]:
    return await asyncio.to_thread(_workers)


@app.get("/api/runs/{dag_id}/{run_id:path}")
def api_run(dag_id: str, run_id: str, session: SessionDep) -> dict:
    return {"dag_id": dag_id, "run_id": run_id, "tasks": run_tasks(session, dag_id, run_id)}


@app.get("/", response_class=HTMLResponse)
async def index(session: SessionDep) -> str:
    workers = await asyncio.to_thread(_workers)
    body = ("<h2>Workers</h2>" + views.workers_html(workers)
            + "<h2>Recent runs with Quail tasks</h2>" + views.runs_html(recent_runs(session))
            + "<h2>Routing by DAG</h2>" + views.routing_html(routing_by_dag(session)))
    return views.page("Quail", body)


@app.get("/runs/{dag_id}/{run_id:path}", response_class=HTMLResponse)
def run_page(dag_id: str, run_id: str, session: SessionDep) -> str:
    return views.run_html(dag_id, run_id, run_tasks(session, dag_id, run_id))
