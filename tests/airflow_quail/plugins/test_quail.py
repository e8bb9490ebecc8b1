"""The Quail page: every route wants an Airflow user (the api-server app in-process, with the simple
auth manager), and its views render a run's plan and accounting."""

import json
import subprocess
import sys

import pytest

from airflow_quail.plugins.views import run_html, tokens_svg, workers_html

APP = """
import json
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app, get_auth_manager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

client = TestClient(create_app())
routes = ["/quail/", "/quail/api/workers", "/quail/api/runs/quail_jokes/r1", "/quail/runs/quail_jokes/r1"]
token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
user = {"Authorization": f"Bearer {token}"}
print(json.dumps({"anonymous": [client.get(r).status_code for r in routes],
                  "user": [client.get(r, headers=user).status_code for r in routes],
                  "page": client.get("/quail/", headers=user).text,
                  "run": client.get("/quail/api/runs/quail_jokes/r1", headers=user).json()}))
"""


def test_every_route_wants_an_airflow_user(airflow_env):
    env, _ = airflow_env
    env = dict(env, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin")
    out = subprocess.run([sys.executable, "-c", APP], env=env, capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout.splitlines()[-1])
    assert all(code in (401, 403) for code in doc["anonymous"]), doc["anonymous"]
    assert doc["user"] == [200, 200, 200, 200]
    assert "<h2>Workers</h2>" in doc["page"] and "No DAG run has Quail tasks yet" in doc["page"]
    assert doc["run"] == {"dag_id": "quail_jokes", "run_id": "r1", "tasks": {}}


MANIFEST = {"target": "sql://db/tech", "rows_in": 24, "rows_out": 17, "windows": 1,
            "stats": {"tokens_computed": 1730, "tokens_naive": 2938,
                      "tokens_reused": {"rewind": 824, "sharing": 384, "retention": 0}},
            "predicted": {"tokens_computed": 1903, "tokens_naive": 2938,
                          "tokens_reused": {"rewind": 651, "sharing": 384, "retention": 0}},
            "plan": {"plan_hash": "abc", "operator": {"rewind": True, "sharing": True,
                                                      "retain": {"consumers": ["theme", "audience"]}}}}


def test_a_run_page_shows_each_tasks_plan_and_tokens_charted():
    html = run_html("quail_jokes", "r1", {"tech": MANIFEST})
    assert "theme, audience" in html and "1,730" in html and "2,938" in html and "41%" in html  # 1 - 1730/2938
    # predicted beside actual, off by (predicted - actual) / actual
    assert "<td>1,903</td><td>1,730</td><td>+10.0%</td>" in html and "<td>651</td><td>824</td><td>-21.0%</td>" in html
    assert "<td>0</td><td>0</td><td>0%</td>" in html
    svg = tokens_svg({"tech": MANIFEST}, width=740)
    # bars as long as the counts: the no-reuse count spans the 600 pixels after the label
    widths = [float(w) for w in __import__("re").findall(r"width='([\d.]+)' height='22'", svg)]
    assert abs(sum(widths) - 600) < 0.5 and abs(widths[0] - 600 * 1730 / 2938) < 0.5
    assert "<script" not in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    # which workers the task's windows ran on, with how many each
    pool = run_html("quail_jokes", "r1", {"tech": MANIFEST | {"workers": {"grpc://gpu0:8815": 3,
                                                                            "grpc://gpu1:8815": 1}}})
    assert "<td class='l'>grpc://gpu0:8815 (3), grpc://gpu1:8815 (1)</td>" in pool
    # an extract's tokens written, beside its prompts' accounting (0 for the kinds that write none)
    extract = MANIFEST | {"stats": MANIFEST["stats"] | {"tokens_generated": 4321}}
    assert "<td>41%</td><td>4,321</td></tr>" in run_html("quail_support", "r1", {"fields": extract})
    assert "<td>41%</td><td>0</td></tr>" in html and ">written</th>" in html


def test_a_blocked_join_shows_its_pairs_asked_and_its_recall():
    certified = {"mode": "certified", "pairs": 1_000_000, "asked": 33_000, "recall_lower": 0.93, "target": 0.9,
                 "delta": 0.05}
    html = run_html("quail_people", "r1", {"pairs": MANIFEST | {"stats": MANIFEST["stats"] | {"blocking": certified}},
                                           "tech": MANIFEST})
    assert "<td>1,000,000</td><td>33,000</td><td>3.30%</td>" in html
    assert "&ge; 0.930 certified (target 0.9, delta 0.05)" in html and html.count("<h2>Joins</h2>") == 1
    assert "<h2>Joins</h2>" not in run_html("quail_jokes", "r1", {"tech": MANIFEST})


def test_the_workers_table_counts_the_arena_pages():
    html = workers_html([{"location": "grpc+unix:///q/w.sock", "jobs": [],
                          "info": {"model": "smollm2-135m", "device": "cpu", "dtype": "float32", "arena_pages": 1024,
                                   "free_pages": 1000, "retained_pages": 20}}])
    assert "<td>1,024</td><td>24</td><td>20</td><td>1,000</td>" in html and "idle" in html


@pytest.mark.parametrize("change", [
    {"stats": "lots"}, {"stats": {"tokens_computed": "1", "tokens_naive": 2, "tokens_reused": {}}},
    {"rows_in": None}, {"plan": {"operator": {"retain": 5}}}, {"workers": {"grpc://w:1": "two"}},
    {"predicted": [1, 2]}, {"routing": {"routed": "elsewhere", "worker": "grpc://w:1"}},
    # #48 14: a count no page can chart (the page failed with 500 on it)
    {"stats": {"tokens_computed": 10 ** 400, "tokens_naive": 2, "tokens_reused": {}}}, {"rows_in": -1},
    {"stats": MANIFEST["stats"] | {"blocking": {"mode": "certified", "pairs": -1, "asked": 0}}},
    {"stats": MANIFEST["stats"] | {"blocking": {"mode": "certified", "pairs": 4, "asked": 1, "recall_lower": 2}}},
])
def test_a_look_alike_manifest_is_not_shown(change):
    """Another task's return value with a manifest's keys but not its shape is left out, where it
    broke the page."""
    from airflow_quail.plugins.app import is_manifest

    assert is_manifest(MANIFEST) and is_manifest(MANIFEST | {"workers": {"grpc://gpu0:8815": 3}})
    assert not is_manifest(MANIFEST | change)


def test_routing_by_dag_shows_the_share_of_tasks_at_home():
    from airflow_quail.plugins import views

    html = views.routing_html({"quail_jokes": {"home": 6, "spilled": 1, "failover": 1, "direct": 0},
                               "one_worker": {"home": 0, "spilled": 0, "failover": 0, "direct": 3}})
    assert "<td class='l'>quail_jokes</td><td>8</td><td>6</td><td>1</td><td>1</td><td>0</td><td>75%</td>" in html
    assert "<td class='l'>one_worker</td><td>3</td>" in html and "<span class='muted'>-</span>" in html
    routed = MANIFEST | {"routing": {"routed": "spilled", "worker": "grpc://gpu1:8815", "why": "its home <b>"}}
    assert "title='spilled: its home &lt;b&gt;'" in run_html("quail_jokes", "r1", {"tech": routed})


def test_a_run_id_of_any_characters_links_to_its_own_page():
    """#48 14: links were built from raw run ids."""
    from airflow_quail.plugins import views

    run = "manual__2026-12-05T04:00:00+00:00/x?y#z'\""
    html = views.runs_html([{"dag_id": "d", "run_id": run, "tasks": 1, "tokens_computed": 1, "tokens_naive": 2}])
    href = html.split("href='")[1].split("'")[0]
    assert href == "runs/d/manual__2026-12-05T04%3A00%3A00%2B00%3A00%2Fx%3Fy%23z%27%22"
