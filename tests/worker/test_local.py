"""The local worker that tasks (and the demo) start on demand, and `quail worker stop`."""

import os
import subprocess
import sys
import time

import pytest


@pytest.mark.model  # a local worker loads smollm2
def test_the_local_worker_admits_only_its_owner_and_quail_worker_stop_stops_it_pid_file_or_not(tmp_path,
                                                                                          monkeypatch):
    import pytest

    from quail.errors import QuailError
    from quail.worker.client import WorkerClient
    from quail.worker.local import ensure_local_worker

    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    location, token = ensure_local_worker("smollm2-135m", "float32", 256)
    [token_file] = (tmp_path / "worker").glob("*.token")
    assert token_file.stat().st_mode & 0o777 == 0o600 and (tmp_path / "worker").stat().st_mode & 0o777 == 0o700
    assert token_file.read_text() == token and len(token) >= 32
    with pytest.raises(QuailError, match="refused the token"):
        WorkerClient(location, None).status()
    for wrong in ("guess", token + "x"):  # a client that holds another token learns so before sending it
        with pytest.raises(QuailError, match="did not prove it holds the connection's token"):
            WorkerClient(location, wrong).status()
    assert WorkerClient(location, token).status() == []
    assert ensure_local_worker("smollm2-135m", "float32", 256) == (location, token)  # found, not restarted
    [pid_file] = (tmp_path / "worker").glob("*.pid")
    pid = int(pid_file.read_text())
    assert WorkerClient(location, token).info()["pid"] == pid
    pid_file.unlink()  # removed under the running worker: it is still found, by its socket and token
    out = subprocess.run([sys.executable, "-m", "quail.cli", "worker", "stop"], capture_output=True, text=True,
                         check=True, env=dict(os.environ, QUAIL_HOME=str(tmp_path))).stdout
    assert out.strip() == f"stopped 1 local worker(s): pid {pid}"
    deadline = time.time() + 60
    while not _exited(pid):
        assert time.time() < deadline, "the worker is still running a minute after SIGTERM"
        time.sleep(0.2)
    assert not list((tmp_path / "worker").glob("*.pid"))


def _exited(pid: int) -> bool:
    """The worker is this process's child (ensure_local_worker started it): reap it to know."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # already reaped by subprocess's own clean-up
        return True


def test_a_local_worker_whose_model_changed_in_place_is_replaced_before_it_answers_again(tiny_model_dir, tmp_path,
                                                                                         monkeypatch):
    """Weights edited in place, size and mtime kept: the running worker takes no more jobs and
    stops, and the next task's ensure_local_worker starts one on the new weights, whose answers
    are the new weights' (compared with a session that loads them afresh, fp32, 1e-4)."""
    import math

    import pytest

    from quail.planner.plan import plan
    from quail.specs import OperatorSpec
    from quail.reuse import Reuse
    from quail.session import Session
    from quail.worker.client import WorkerClient, WorkerLost
    from quail.worker.jobs import Origin
    from quail.worker.local import ensure_local_worker, stop_local_workers
    from tests.edits import copy_model, scale_tensor_in_place

    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    model = copy_model(tiny_model_dir, tmp_path / "model")
    texts = ["The striker scored twice.", "Rates rose again.", "The keeper saved a penalty."]
    spec = OperatorSpec("sport", "filter", ("news",), ("text",), ("Is this about sport?",), threshold=0.0)

    def answers(client: WorkerClient, run: str) -> list[float]:
        job, _ = client.submit(Origin("news", "sport", run), spec, plan([spec])["sport"], Reuse(),
                               [(texts, list(range(len(texts))))])
        assert client.wait(job, poll=0.05)["state"] == "done"
        return client.fetch(job).column("p_yes_1").to_pylist()

    try:
        location, token = ensure_local_worker(str(model), "float32", 256)
        old = WorkerClient(location, token)
        before, old_answers = old.info(), answers(old, "day1")
        [pid_file] = (tmp_path / "worker").glob("*.pid")
        old_pid = int(pid_file.read_text())
        scale_tensor_in_place(model, 0, 2.0)  # lm_head
        with pytest.raises(WorkerLost, match="files changed"):
            answers(old, "day2")
        location, token = ensure_local_worker(str(model), "float32", 256)
        new = WorkerClient(location, token)
        after = new.info()
        assert after["current"] and after["identity"] != before["identity"] and int(pid_file.read_text()) != old_pid
        assert _exited(old_pid)
        fresh, _ = Session.open(str(model), "float32", arena_pages=256).filter(texts, ["Is this about sport?"], 0.0,
                                                                              reuse=False)
        new_answers = answers(new, "day2")
        assert all(math.isclose(a, b[0], rel_tol=1e-4) for a, b in zip(new_answers, fresh.raw_p_yes))
        assert not all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(new_answers, old_answers))
    finally:
        stop_local_workers(tmp_path / "worker")


def test_a_task_with_another_answer_store_gets_a_local_worker_of_its_own(monkeypatch, tmp_path):
    """#48 19: the local worker was found by its model alone, so a task whose QUAIL_ANSWER_STORE
    differed was served, silently, with the running worker's store."""
    from quail.worker.local import _ident

    monkeypatch.setenv("QUAIL_ANSWER_STORE", str(tmp_path / "a.sqlite"))
    first = _ident("smollm2-135m", "auto", None, "auto")
    assert _ident("smollm2-135m", "auto", None, "auto") == first
    monkeypatch.setenv("QUAIL_ANSWER_STORE", str(tmp_path / "b.sqlite"))
    assert _ident("smollm2-135m", "auto", None, "auto") != first
    monkeypatch.setenv("QUAIL_ANSWER_STORE", str(tmp_path / "a.sqlite"))
    monkeypatch.setenv("QUAIL_ANSWER_STORE_KEY", "another key of at least 16 characters")
    assert _ident("smollm2-135m", "auto", None, "auto") != first
