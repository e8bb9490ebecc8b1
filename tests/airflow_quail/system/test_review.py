"""The review example (dags/quail_review.py) under `airflow dags test`: the classify's unsure rows
go to a larger model and a review table, Airflow's human-in-the-loop operator waits for a
decision, a reviewer gives it through the REST API, and the last task applies it."""

import json
import subprocess

import pyarrow.parquet as pq
import pytest

from tests.airflow_quail.system.deployment import login, served, start, stop, until

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # Airflow's api-server; the local worker loads a model


def test_a_reviewers_decision_given_through_the_api_is_applied(airflow_env, tmp_path, tiny_model_dir):
    env, airflow = airflow_env
    env, base = served(env, tmp_path)
    out = tmp_path / "out"
    env |= {"QUAIL_DAG_OUTPUT": str(out), "QUAIL_REVIEW_CASCADE": "smollm2-135m", "QUAIL_REVIEW_BAND": "0.3",
            "AIRFLOW_CONN_QUAIL_DEFAULT": json.dumps({"conn_type": "quail", "extra": {
                "model": str(tiny_model_dir), "dtype": "float32"}})}
    procs = start(airflow, {"api-server": ["api-server", "--host", "127.0.0.1", "--port", env["QUAIL_TEST_API_PORT"]]},
                  env, tmp_path)
    log = open(tmp_path / "dags-test.log", "w")
    run = subprocess.Popen([airflow, "dags", "test", "quail_review"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _, api = login(base)
        def waiting():
            assert run.poll() is None, (tmp_path / "dags-test.log").read_text()[-3000:]
            # a decision given before the task instance is awaiting input is lost: the task runner's state
            # update lands after it, and the run waits for ever (a 40 ms race seen under load)
            return [d for d in api.get("/dags/quail_review/dagRuns/~/hitlDetails").json()["hitl_details"]
                    if not d["response_received"] and d["task_instance"]["state"] == "awaiting_input"]

        [pending] = until("the review to wait for a decision", waiting, 600)
        review = pq.read_table(out / "topic_review.parquet").to_pylist()
        assert review and all(r["escalated"] for r in review)
        assert f"{len(review)} of the news items were unsure" in pending["body"]
        first = review[0]["id"]
        other = next(label for label in ("weather", "sport") if label != review[0]["label"])
        ti = pending["task_instance"]
        api.patch(f"/dags/quail_review/dagRuns/{ti['dag_run_id']}/taskInstances/review/-1/hitlDetails",
                  json={"chosen_options": ["Accept"], "params_input": {"corrections": f"{first}={other}"}}
                  ).raise_for_status()
        assert run.wait(timeout=600) == 0
    finally:
        run.kill()
        stop(procs)
    assert "state=success" in (tmp_path / "dags-test.log").read_text()
    topic = pq.read_table(out / "topic.parquet").to_pylist()
    final = {r["id"]: r for r in pq.read_table(out / "topic_final.parquet").to_pylist()}
    assert len(final) == len(topic)  # Accept keeps every row
    assert {i for i, r in final.items() if r["reviewed"]} == {r["id"] for r in review}
    assert [i for i, r in final.items() if r["corrected"]] == [first] and final[first]["label"] == other
    assert all(final[r["id"]]["label"] == r["label"] for r in topic if r["id"] != first)
