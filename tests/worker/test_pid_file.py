"""A worker's pid file (worker/liveness.py): what lies at its path is taken over only when it is a
pid file a worker of this user wrote, a dead one's; anything else is refused, never truncated,
signalled or removed."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from quail.cli.main import main
from quail.errors import QuailError
from quail.worker.liveness import hold, holder, pid_path, release
from quail.worker.local import stop_local_workers


def _folder(path):
    """Every name in the folder, with its kind, bytes and times: what a refusal must leave as it is."""
    def state(p):
        st = p.lstat()
        return st.st_mode, st.st_mtime_ns, p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return {p.name: state(p) for p in path.iterdir()}


@pytest.mark.parametrize("plant", ["notes", "pid_and_newline", "empty", "link", "folder", "open_to_others"])
def test_serve_beside_a_pid_file_no_worker_wrote_refuses_before_the_model_and_keeps_the_folder(tmp_path, capsys,
                                                                                               plant):
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    pid_file = d / "notes.pid"
    if plant == "notes":
        pid_file.write_text("notes\n")
    elif plant == "pid_and_newline":
        pid_file.write_text("1234\n")  # another program's pid file: Quail writes no newline
    elif plant == "empty":
        pid_file.touch()
    elif plant == "link":
        (d / "elsewhere.txt").write_text("notes\n")
        pid_file.symlink_to(d / "elsewhere.txt")
    elif plant == "folder":
        pid_file.mkdir()
    else:
        pid_file.write_text("1234")
        pid_file.chmod(0o666)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(d / "notes.sock"))
    stale.close()  # a dead worker's socket: left too, since the start is refused
    before = _folder(d)
    with pytest.raises(SystemExit) as e:
        main(["worker", "serve", "--socket", str(d / "notes.sock"), "--model", "/nonexistent.gguf"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"quail: error: pid file {pid_file} exists and is not one this user's worker" in err
    assert "Traceback" not in err and "quail worker: loading" not in err, err
    assert _folder(d) == before


def _killed_worker(location):
    """A worker that held its pid file and was killed (kill -9): its pid file stays, unlocked."""
    code = (f"import sys, time; sys.path[:0] = {sys.path!r}; from quail.worker.liveness import hold; "
            f"f = hold({location!r}); print('held', flush=True); time.sleep(60)")
    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "held"
    assert holder(pid_path(location)) == worker.pid
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    worker.stdout.close()
    assert pid_path(location).read_text() == str(worker.pid) and holder(pid_path(location)) is None
    return worker.pid


@pytest.mark.services  # three Python processes, one of them `quail worker serve`
def test_a_pid_file_a_killed_worker_left_is_taken_over(tmp_path):
    location = f"grpc+unix://{tmp_path / 'w.sock'}"
    _killed_worker(location)
    serve = subprocess.Popen([sys.executable, "-m", "quail.cli", "worker", "serve", "--socket",
                              str(tmp_path / "w.sock"), "--model", "/nonexistent.gguf"],
                             stderr=subprocess.PIPE, text=True)
    _, err = serve.communicate(timeout=120)
    assert serve.returncode == 2 and "quail: error: --model '/nonexistent.gguf'" in err, err  # past the pid file
    assert pid_path(location).read_text() == str(serve.pid)  # that start failed: its file is stale in turn
    _killed_worker(location)
    alive = hold(location)
    assert pid_path(location).read_text() == str(os.getpid()) and pid_path(location).stat().st_mode & 0o777 == 0o600
    release(alive, location)
    assert not pid_path(location).exists() and sorted(os.listdir(tmp_path)) == []


def test_a_pid_file_that_replaced_a_workers_own_is_left_at_its_exit(tmp_path):
    location = f"grpc+unix://{tmp_path / 'w.sock'}"
    alive = hold(location)
    pid_path(location).unlink()
    pid_path(location).write_text("notes\n")
    with pytest.raises(QuailError, match="is not one this user's worker wrote"):
        hold(location)
    release(alive, location)
    assert pid_path(location).read_text() == "notes\n"


def test_quail_worker_stop_neither_signals_nor_removes_a_pid_file_no_worker_wrote(tmp_path):
    """A program that locks a pid file of its own (as daemons do) is not a worker, even in the
    workers' folder; a dead worker's pid file there is removed."""
    (tmp_path / "notes.pid").write_text("notes\n")
    locked = tmp_path / "daemon.pid"
    code = ("import fcntl, os, sys, time; f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); "
            "f.write(f'{os.getpid()}\\n'); f.flush(); print('locked', flush=True); time.sleep(60)")
    daemon = subprocess.Popen([sys.executable, "-c", code, str(locked)], stdout=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout.readline().strip() == "locked"
        dead = f"grpc+unix://{tmp_path / 'dead.sock'}"
        _killed_worker(dead)
        assert holder(locked) is None
        assert stop_local_workers(tmp_path) == []
        assert daemon.poll() is None and locked.read_text() == f"{daemon.pid}\n"
        assert (tmp_path / "notes.pid").read_text() == "notes\n" and not pid_path(dead).exists()
    finally:
        daemon.kill()
        daemon.wait()
        daemon.stdout.close()
