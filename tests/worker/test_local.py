"""The local worker that tasks (and the demo) start on demand, and `quail worker stop`."""

import os
import subprocess
import sys
import time


def test_the_local_worker_admits_only_its_owner_and_quail_worker_stop_stops_it(tmp_path, monkeypatch):
    import pytest

    from quail.errors import QuailError
    from quail.worker.client import WorkerClient
    from quail.worker.local import ensure_local_worker

    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    location, token = ensure_local_worker("smollm2-135m", "float32", 256)
    [token_file] = (tmp_path / "worker").glob("*.token")
    assert token_file.stat().st_mode & 0o777 == 0o600 and (tmp_path / "worker").stat().st_mode & 0o777 == 0o700
    assert token_file.read_text() == token and len(token) >= 32
    for wrong in (None, "guess", token + "x"):
        with pytest.raises(QuailError, match="refused the token"):
            WorkerClient(location, wrong).status()
    assert WorkerClient(location, token).status() == []
    assert ensure_local_worker("smollm2-135m", "float32", 256) == (location, token)  # found, not restarted
    [pid_file] = (tmp_path / "worker").glob("*.pid")
    pid = int(pid_file.read_text())
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
