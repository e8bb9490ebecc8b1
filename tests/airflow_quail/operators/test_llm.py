"""The operators: templated fields; a task killed mid-job and retried re-attaches to its job on the
worker (the origin has no try number); a cleared task re-run on changed input computes it anew;
windows are staged and a retry resumes after the first unstaged one; the output is written once."""

import json
import multiprocessing
import os
import signal
import time
from types import SimpleNamespace

import pyarrow.parquet as pq

from airflow_quail.hooks.quail import QuailHook
from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator, LLMJoinOperator

NEWS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "news.csv")


def _operator(target: str) -> LLMFilterOperator:
    return LLMFilterOperator(task_id="sport", source=NEWS, text_column="text", target=target, threshold=0.1,
                             predicates=["Is this article about sport?", "Does it report a result?"])


def _context(try_number: int) -> dict:
    return {"ti": SimpleNamespace(dag_id="news", task_id="sport", run_id="r1", map_index=-1, try_number=try_number)}


def _first_try(target: str) -> None:
    _operator(target).execute(_context(1))


def test_a_killed_task_retries_into_the_same_job(local_default, tmp_path):
    target = str(tmp_path / "sport.parquet")
    client = QuailHook().get_conn()  # the worker is up before the first try starts
    first = multiprocessing.get_context("spawn").Process(target=_first_try, args=(target,))
    first.start()
    deadline = time.time() + 120
    while not client.status():
        assert time.time() < deadline and first.is_alive()
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)  # killed while its job is queued or running on the worker
    first.join()
    assert not os.path.exists(target)
    manifest = _operator(target).execute(_context(2))
    [job] = client.status()  # one job for this origin: the retry attached to it
    assert job["state"] == "done"
    assert manifest["rows_out"] == pq.read_table(target).num_rows
    assert manifest["stats"] == job["stats"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".sport")] == []  # no temporary files


def test_on_kill_cancels_the_running_job_and_writes_nothing(local_default, tmp_path):
    import threading

    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pytest
    from airflow.exceptions import AirflowException

    source = tmp_path / "many.csv"
    pacsv.write_csv(pa.table({"text": [f"Match report number {i}: the home side won." for i in range(400)]}), source)
    target = str(tmp_path / "out.parquet")
    op = LLMFilterOperator(task_id="sport", source=str(source), text_column="text", target=target,
                           predicates=["Is this about sport?"])
    client = QuailHook().get_conn()
    failure = []

    def run():
        with pytest.raises(AirflowException) as e:
            op.execute(_context(1))
        failure.append(str(e.value))

    task = threading.Thread(target=run)
    task.start()
    deadline = time.time() + 120
    while not [j for j in client.status() if j["rows_done"] > 0]:
        assert time.time() < deadline and task.is_alive()
        time.sleep(0.05)
    op.on_kill()
    task.join(timeout=120)
    [job] = client.status()
    assert job["state"] == "cancelled" and job["rows_done"] < 400
    assert "cancelled" in failure[0] and not os.path.exists(target)


def _write_news(path, texts: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    pacsv.write_csv(pa.table({"id": list(range(len(texts))), "text": texts}), path)


def test_a_cleared_task_rerun_on_changed_input_writes_the_new_rows(local_default, tmp_path):
    source, target = tmp_path / "news.csv", str(tmp_path / "out.parquet")
    _write_news(source, [f"Match report {i}: the home side won." for i in range(6)])
    op = LLMFilterOperator(task_id="sport", source=str(source), text_column="text", target=target, threshold=0.0,
                           predicates=["Is this about sport?"])
    first = op.execute(_context(1))
    assert first["rows_out"] == 6
    _write_news(source, ["Rates rose again.", "A new phone chip."])  # the data changed; the task is cleared
    second = op.execute(_context(1))
    out = pq.read_table(target)
    assert second["rows_in"] == second["rows_out"] == out.num_rows == 2
    assert out.column("text").to_pylist() == ["Rates rose again.", "A new phone chip."]
    jobs = QuailHook().get_conn().status()
    assert len({j["ref"] for j in jobs}) == 2


def test_a_deferred_task_whose_input_changed_while_it_waited_writes_nothing(local_default, tmp_path):
    import pytest
    from airflow.exceptions import AirflowException
    from airflow.sdk.exceptions import TaskDeferred

    source, target = tmp_path / "news.csv", str(tmp_path / "out.parquet")
    _write_news(source, [f"Match report {i}: the home side won." for i in range(4)])
    op = LLMFilterOperator(task_id="sport", source=str(source), text_column="text", target=target, threshold=0.0,
                           predicates=["Is this about sport?"], deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_context(1))
    client = QuailHook().get_conn()
    status = client.wait(deferred.value.trigger.job_id, poll=0.05)
    _write_news(source, ["Rates rose again."])
    with pytest.raises(AirflowException, match="changed while its job ran"):
        op.execute_complete(_context(1), status)
    assert not os.path.exists(target)


def test_a_task_whose_worker_died_goes_on_within_its_try(local_default, tmp_path, monkeypatch, capsys):
    """Three windows; the worker is killed while the second window's job runs. The same try starts
    a new worker, resubmits from the second window there, and writes one whole output."""
    import pyarrow as pa

    from airflow_quail.staging import WindowStage
    from quail.cli.describe import whole_table
    from quail.worker.client import WorkerClient

    source, target = tmp_path / "news.parquet", str(tmp_path / "out.parquet")
    texts = [f"Match report {i}: the home side won." for i in range(12)]
    pq.write_table(pa.table({"id": list(range(12)), "text": texts}), source)
    op = LLMFilterOperator(task_id="sport", source=str(source), text_column="text", target=target, threshold=0.0,
                           predicates=["Is this about sport?"], window_rows=4)
    put, staged, submit, killed, ids = WindowStage.put, [], WorkerClient.submit, [], []

    def submit_then_kill_the_worker(self, origin, *args, **kwargs):
        job = submit(self, origin, *args, **kwargs)
        ids.append(job[0])
        if origin.window == 1 and not killed:
            [pid] = local_default.glob("*.pid")
            os.kill(killed.append(int(pid.read_text())) or killed[0], signal.SIGKILL)
        return job

    monkeypatch.setattr(WindowStage, "put", lambda self, *args: put(self, *args) or staged.append(args[0]))
    monkeypatch.setattr(WorkerClient, "submit", submit_then_kill_the_worker)
    manifest = op.execute(_context(1))
    log = "".join(capsys.readouterr())
    assert "no Quail worker answers" in log and "answers; resubmitting" in log, log
    assert len(ids) == 4 and not any(job in log for job in ids)  # the capability stays out of the task log
    [pid] = local_default.glob("*.pid")
    assert int(pid.read_text()) != killed[0]  # a new worker
    jobs = QuailHook().get_conn().status()  # the new worker computed the second and third windows
    assert sorted(j["origin"]["window"] for j in jobs) == [1, 2] and staged == [0, 1, 2]
    [last] = [j for j in jobs if j["origin"]["window"] == 2]
    assert (last["first_row"], last["table_rows"]) == (8, 12)  # where it stands in the whole table
    assert "table: 12/12 rows (100%)" in whole_table(last)
    out = pq.read_table(target)
    assert out.column("text").to_pylist() == texts and manifest["rows_out"] == 12 and manifest["windows"] == 3
    assert manifest["stats"]["tokens_computed"] + sum(manifest["stats"]["tokens_reused"].values()) \
        == manifest["stats"]["tokens_naive"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # staging removed


def test_operators_template_their_questions_and_paths():
    assert {"source", "target", "predicates", "quail_plan"} <= set(LLMFilterOperator.template_fields)
    assert {"labels", "question"} <= set(LLMClassifyOperator.template_fields)
    assert {"left", "right", "condition"} <= set(LLMJoinOperator.template_fields)
    for op in (LLMFilterOperator, LLMClassifyOperator, LLMJoinOperator):  # shown as JSON in Rendered Templates
        assert op.template_fields_renderers["quail_plan"] == "json"
        assert set(op.template_fields_renderers) <= set(op.template_fields)


def test_a_bad_target_is_refused_before_any_work_is_sent(local_default, tmp_path):
    import pytest
    from airflow.exceptions import AirflowException

    import pyarrow as pa

    source = tmp_path / "news.parquet"
    pq.write_table(pa.table({"text": ["Match report: the home side won."]}), source)
    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    for target, says in ((str(a_file / "out.parquet"), "is a file, not a folder"),
                         ("/proc/out.parquet", "cannot write in /proc"),
                         ("sql://no_such_conn/kept", "the connection 'no_such_conn' is not defined"),
                         (str(source), "is one of the inputs"),
                         (f"file://{source}", "is one of the inputs"),
                         (f"file://{tmp_path}/./news.parquet", "is one of the inputs"),
                         ("file:///proc/out.parquet", "cannot write in /proc"),
                         (f"file://{a_file}/out.parquet", "is a file, not a folder")):
        op = LLMFilterOperator(task_id="sport", source=str(source), text_column="text", target=target,
                               predicates=["Is this about sport?"])
        with pytest.raises(AirflowException, match=says):
            op.execute(_context(1))
    assert not local_default.exists()  # no worker was started: nothing was sent
    assert pq.read_table(source).num_rows == 1


def test_a_filter_takes_a_cascade_and_a_malformed_one_names_the_parameter(tmp_path):
    import pytest
    from airflow.exceptions import AirflowException

    from quail.specs import Cascade

    op = LLMFilterOperator(task_id="sport", source=NEWS, text_column="text", target=str(tmp_path / "o.parquet"),
                           predicates=["Is this about sport?"],
                           cascade={"model": "qwen2.5-coder-1.5b", "band": [0.1, 0.9]})
    assert op.spec().cascade == Cascade("qwen2.5-coder-1.5b", 0.1, 0.9)
    with pytest.raises(AirflowException, match="task 'sport': cascade 'band' must be two numbers"):
        LLMFilterOperator(task_id="sport", source=NEWS, text_column="text", target=str(tmp_path / "o.parquet"),
                          predicates=["Is this about sport?"], cascade={"model": "x", "band": [0.1]})


def test_an_event_that_is_not_a_job_status_is_refused_before_anything_runs(tmp_path):
    import pytest
    from airflow.exceptions import AirflowException

    op = LLMFilterOperator(task_id="sport", source=NEWS, text_column="text", target=str(tmp_path / "o.parquet"),
                           predicates=["Is this about sport?"])
    for event, window in (({"state": "done"}, 0), (["done"], 0), (None, 0), ({"job": "j", "state": "done",
                          "documents": "d", "stats": {}, "predicted": {}, "error": None}, "0")):
        with pytest.raises(AirflowException, match="task 'sport': the trigger's event is not a Quail job's end"):
            op.execute_complete(_context(1), event, window)
    assert not (tmp_path / "o.parquet").exists()


def test_a_setting_of_the_wrong_type_names_the_task_and_the_key_before_any_work(local_default, tmp_path):
    import pytest
    from airflow.exceptions import AirflowException

    op = LLMFilterOperator(task_id="sport", source=NEWS, text_column="text", target=str(tmp_path / "o.parquet"),
                           predicates=["Is this about sport?"], limit="5")
    with pytest.raises(AirflowException, match="task 'sport': 'limit' must be a whole number of rows, got '5'"):
        op.execute(_context(1))
    assert not local_default.exists()  # no worker was started: nothing was sent


def test_a_budget_refuses_a_plan_that_predicts_more_and_stops_a_run_that_computes_more(local_default, tmp_path,
                                                                                         monkeypatch):
    """max_tokens (or the connection's extra): the worker predicts the task window by window with
    nothing computed, and a plan over the budget is refused; a run whose prediction fits but
    whose computing passes the budget stops at that window, with no output."""
    import pyarrow as pa
    import pytest
    from airflow.exceptions import AirflowException

    from quail.worker.client import WorkerClient

    source, target = tmp_path / "news.parquet", tmp_path / "out.parquet"
    texts = [f"Match report {i}: the home side won." for i in range(12)]
    pq.write_table(pa.table({"text": texts}), source)

    def op(**kwargs):
        return LLMFilterOperator(task_id="sport", source=str(source), text_column="text", target=str(target),
                                 predicates=["Is this about sport?"], threshold=0.0, window_rows=4, **kwargs)

    with pytest.raises(AirflowException, match=r"'sport': the plan predicts [\d,]+ computed tokens, over its budget "
                                               r"\(max_tokens 10\); nothing was computed"):
        op(max_tokens=10).execute(_context(1))
    jobs = QuailHook().get_conn().status()
    assert len(jobs) == 3 and all(j["tokens_computed"] == 0 and j["stats"] is None for j in jobs)
    predicted = jobs[0]["predicted"]["tokens_computed"]
    with pytest.raises(AirflowException, match="must be a whole number above 0"):
        op(max_tokens=0).execute(_context(1))

    # a prediction that fits, and a computing that does not (the prediction made too small here)
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_DEFAULT", json.dumps(
        {"conn_type": "quail", "extra": {"model": "smollm2-135m", "dtype": "float32", "arena_pages": 1024,
                                         "max_tokens": predicted + 1}}))
    status = WorkerClient.status

    def predicting_less(self, job_id=""):
        s = status(self, job_id)
        if job_id and s["predicted"] and s["stats"] is None:
            s["predicted"]["tokens_computed"] = 0
        return s

    monkeypatch.setattr(WorkerClient, "status", predicting_less)
    with pytest.raises(AirflowException, match=r"passed its budget: [\d,]+ tokens computed by window 1 \(rows 4-7\)"):
        op().execute(_context(1))
    assert not target.exists()


def test_a_remote_worker_that_never_comes_back_fails_the_try_after_the_bound(tmp_path, monkeypatch):
    """The wait for a lost worker is bounded by the connection's extra worker_lost_timeout."""
    import pyarrow as pa
    import pytest
    from airflow.exceptions import AirflowException

    from tests.airflow_quail.conftest import free_port

    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_DEFAULT", json.dumps(
        {"conn_type": "quail", "host": "127.0.0.1", "port": free_port(), "password": "t",
         "extra": {"worker_lost_timeout": 3}}))
    source = tmp_path / "news.parquet"
    pq.write_table(pa.table({"text": ["Match report: the home side won."]}), source)
    op = LLMFilterOperator(task_id="sport", source=str(source), text_column="text", target=str(tmp_path / "o.parquet"),
                           predicates=["Is this about sport?"])
    started = time.monotonic()
    with pytest.raises(AirflowException, match=r"no Quail worker answered for 3 s \(the connection's extra "
                                               r"`worker_lost_timeout`\)"):
        op.execute(_context(1))
    assert time.monotonic() - started < 30
    # a pool none of whose workers answers yet (a rolling update) is waited for alike, not failed at once
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_DEFAULT", json.dumps(
        {"conn_type": "quail", "password": "t", "extra": {"worker_lost_timeout": 3, "workers": [
            f"grpc://127.0.0.1:{free_port()}", f"grpc://127.0.0.1:{free_port()}"]}}))
    started = time.monotonic()
    with pytest.raises(AirflowException, match=r"no Quail worker answered for 3 s .*none of the connection's"):
        op.execute(_context(1))
    assert 0.9 < time.monotonic() - started < 30  # waited, with a backoff, rather than failing at once
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_DEFAULT", json.dumps(
        {"conn_type": "quail", "host": "127.0.0.1", "extra": {"worker_lost_timeout": "soon"}}))
    with pytest.raises(AirflowException, match="the extra 'worker_lost_timeout' must be a number of seconds"):
        op.execute(_context(1))


def test_a_join_s_recall_settings_are_checked_before_any_work(local_default, tmp_path):
    import pytest
    from airflow.exceptions import AirflowException

    def join(**kwargs):
        return LLMJoinOperator(task_id="pairs", left=NEWS, right=NEWS, left_column="text", right_column="text",
                               condition="Both are about sport.", target=str(tmp_path / "o.parquet"), **kwargs)

    assert join(recall_target=0.9, recall_delta=0.1).spec().recall_delta == 0.1
    assert join(candidates=3, embedding="all-MiniLM-L6-v2").spec().candidates == 3
    for kwargs, match in (({"recall_target": 1.5}, "recall_target must be in"),
                          ({"recall_target": 0.9, "recall_delta": 0.0}, "recall_delta must be in"),
                          ({"recall_target": 0.9, "candidates": 2}, "recall_target and candidates")):
        with pytest.raises(AirflowException, match=f"task 'pairs': {match}"):
            join(**kwargs).execute(_context(1))
    assert not local_default.exists() and not (tmp_path / "o.parquet").exists()
