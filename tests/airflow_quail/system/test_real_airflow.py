"""One real Airflow: api-server, scheduler, dag-processor and triggerer on 127.0.0.1 with the
LocalExecutor and SQLite; the jokes DAG is triggered through the REST API v2 with a token, its
tasks run in processes of their own, and the later ones reuse the KV the first one computed."""

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.airflow_quail.conftest import JOKES, worker_jobs
from tests.airflow_quail.system.deployment import ended, login, served, services, start, stop, trigger, until

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # Airflow's processes; the local worker loads smollm2


def _the_quail_page(base: str, token: str, run: str, tmp_path: Path) -> None:
    """The plugin is mounted on the real api-server: a user sees the run's Quail tasks, an anonymous
    request is refused; headless Chromium, where installed, takes a screenshot of the page, and at
    600 px wide (graph view's side panel) finds it no wider than the window: its tables wrap."""
    import shutil

    assert httpx.get(f"{base}/quail/runs/quail_jokes/{run}").status_code in (401, 403)
    page = httpx.get(f"{base}/quail/runs/quail_jokes/{run}", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and all(t in page.text for t in ("tech", "theme", "by_technology", "audience"))
    chromium = shutil.which("chromium")
    if chromium is None:
        return
    # the page is self-contained (inline SVG, no script or asset), so its saved HTML renders as served
    (tmp_path / "quail.html").write_text(page.text)
    headless = [chromium, "--headless", "--no-sandbox", "--disable-gpu"]
    for size, png in (("1280,780", "quail-page.png"), ("600,900", "quail-page-600.png")):
        subprocess.run([*headless, f"--window-size={size}", f"--screenshot={tmp_path / png}",
                        f"file://{tmp_path / 'quail.html'}"], check=True, capture_output=True, timeout=120)
        assert (tmp_path / png).stat().st_size > 10_000
    (tmp_path / "quail-fits.html").write_text(page.text + "<script>document.body.dataset.fits = "
                                              "document.documentElement.scrollWidth <= window.innerWidth</script>")
    dom = subprocess.run([*headless, "--window-size=600,900", "--dump-dom", f"file://{tmp_path / 'quail-fits.html'}"],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    assert 'data-fits="true"' in dom, "the Quail page is wider than 600 px"


def _the_digest_ran_on_the_filters_asset(api, run: str, tmp_path: Path) -> None:
    """tech's target is an outlet Asset: its success recorded an Asset event, which triggered a run
    of quail_jokes_digest (scheduled on that Asset), and the digest read the filter's table."""
    events = api.get("/assets/events", params={"source_dag_id": "quail_jokes", "source_run_id": run}).json()
    [tech] = [e for e in events["asset_events"] if e["source_task_id"] == "tech"]
    assert tech["uri"] == f"sqlite:{tmp_path / 'demo.db'}/tech_jokes"  # Airflow drops the empty netloc
    [digest] = tech["created_dagruns"]
    assert digest["dag_id"] == "quail_jokes_digest"
    assert ended(api, "quail_jokes_digest", digest["run_id"]) == "success"
    assert (tmp_path / "out" / "digest.txt").read_text().split()[4] == "quail_jokes.tech"


def test_jokes_dag_under_a_real_airflow(airflow_env, tmp_path):
    env, airflow = airflow_env
    env, base = served(env, tmp_path)
    env = dict(env, AIRFLOW__CORE__EXECUTOR="LocalExecutor", QUAIL_DAG_OUTPUT=str(tmp_path / "out"),
               AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "log_file_path": str(tmp_path / "ol"),
                                                            "append": True}))
    procs = start(airflow, services(env), env, tmp_path)
    try:
        token, api = login(base)
        until("the digest DAG to be parsed", lambda: api.get("/dags/quail_jokes_digest").status_code == 200, 180)
        api.patch("/dags/quail_jokes_digest", json={"is_paused": False}).raise_for_status()
        run = trigger(api, "quail_jokes", {"rows": JOKES})
        state = ended(api, "quail_jokes", run)
        tasks = {t["task_id"]: t["state"] for t in api.get(f"/dags/quail_jokes/dagRuns/{run}/taskInstances")
                 .json()["task_instances"]}
        assert state == "success", (tasks, (tmp_path / "scheduler.log").read_text()[-3000:])
        _the_quail_page(base, token, run, tmp_path)
        _the_digest_ran_on_the_filters_asset(api, run, tmp_path)
    finally:
        stop(procs)
    stats = {j["operator"]: j["stats"] for j in worker_jobs(tmp_path)}
    assert stats["theme"]["tokens_reused"]["store"] > 0  # computed ahead in tech's jobs, found in the store
    for task in ("by_technology", "audience"):
        assert stats[task]["tokens_reused"]["retention"] > 0, task  # across task processes
    assert (Path(tmp_path) / "out" / "report.txt").exists()
    events = [json.loads(line) for line in (tmp_path / "ol").read_text().splitlines()]
    [tech] = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == "quail_jokes.tech"]
    assert [d["name"] for d in tech["inputs"]] == ["jokes"] and [d["name"] for d in tech["outputs"]] == ["tech_jokes"]
