"""The local worker that tasks (and the demo) start on demand, and `quail worker stop`."""

import os
import subprocess
import sys
import time


def test_quail_worker_stop_stops_the_local_worker(tmp_path, monkeypatch):
    from quail.worker.local import ensure_local_worker

    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    ensure_local_worker("smollm2-135m", "float32", 256)
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
