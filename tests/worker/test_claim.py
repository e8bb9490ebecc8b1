"""A worker's socket and token paths: what lies there is replaced only when it is this user's own
stale socket or token, never a file of the user's data."""

import os
import socket

import pytest

from quail.cli.main import main
from quail.errors import QuailError
from quail.worker.server import claim_location
from quail.worker.tokens import new_token, read_token, token_path, write_token


def test_serve_on_a_socket_path_that_names_a_file_keeps_the_file(tmp_path, capsys):
    data = tmp_path / "data.parquet"
    data.write_bytes(b"PAR1 rows")
    with pytest.raises(SystemExit) as e:
        main(["worker", "serve", "--socket", str(data)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "quail: error:" in err and "is not a socket (a file)" in err, err
    assert "Traceback" not in err and data.read_bytes() == b"PAR1 rows"


def test_a_folder_or_a_link_is_not_a_socket(tmp_path):
    (tmp_path / "dir.sock").mkdir()
    (tmp_path / "link.sock").symlink_to(tmp_path / "elsewhere")
    for name, what in (("dir.sock", "a folder"), ("link.sock", "a link")):
        with pytest.raises(QuailError, match=f"is not a socket \\({what}\\)"):
            claim_location(f"grpc+unix://{tmp_path / name}")
    assert (tmp_path / "dir.sock").is_dir() and (tmp_path / "link.sock").is_symlink()


def test_a_stale_socket_is_removed_and_a_live_one_refused(tmp_path):
    path = tmp_path / "w.sock"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(path))
    live.listen()
    with pytest.raises(QuailError, match="a worker already listens"):
        claim_location(f"grpc+unix://{path}")
    live.close()  # the file stays, and nothing listens: a worker that died
    assert path.exists()
    assert claim_location(f"grpc+unix://{path}") == path and not path.exists()


def test_a_token_path_holding_anything_but_an_old_token_is_left_alone(tmp_path):
    location = f"grpc+unix://{tmp_path / 'data.parquet'}"
    data = token_path(location)
    data.write_text("the user's own notes")
    with pytest.raises(QuailError, match="is not a token this user's worker wrote"):
        write_token(location, new_token())
    assert data.read_text() == "the user's own notes"
    data.unlink()
    write_token(location, first := new_token())
    write_token(location, second := new_token())  # an earlier worker's token is replaced
    assert first != second == read_token(location)
    assert data.stat().st_mode & 0o777 == 0o600


def test_a_socket_folder_or_token_that_others_can_write_is_refused(tmp_path):
    """Probe 5: a socket in a folder other users can write could be swapped for a fake worker's, and
    a token file others can write or read could be planted or stolen."""
    from quail.worker.client import WorkerClient

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(QuailError, match="folder .*shared is writable by other users"):
        claim_location(f"grpc+unix://{shared / 'w.sock'}")
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(shared / "w.sock"))
    with pytest.raises(QuailError, match="writable by other users"):
        WorkerClient(f"grpc+unix://{shared / 'w.sock'}", "t")
    live.close()
    location = f"grpc+unix://{tmp_path / 'w.sock'}"
    write_token(location, new_token())
    token_path(location).chmod(0o644)
    with pytest.raises(QuailError, match="is open to other users"):
        read_token(location)


def test_quail_home_that_others_can_write_is_refused(tmp_path, monkeypatch):
    from quail.paths import home

    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    assert home().stat().st_mode & 0o777 == 0o700
    home().chmod(0o775)
    with pytest.raises(QuailError, match="home is writable by other users"):
        home()


@pytest.mark.skipif(os.getuid() != 0, reason="planting a folder as another user needs root")
def test_folders_another_user_owns_are_refused(tmp_path, monkeypatch):
    """Probe 4 and 5 as the probe ran them: a second uid's QUAIL_HOME, socket folder or staging folder."""
    from quail.paths import home

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 4242, 4242)
    monkeypatch.setenv("QUAIL_HOME", str(theirs))
    with pytest.raises(QuailError, match="belongs to another user \\(uid 4242\\)"):
        home()
    with pytest.raises(QuailError, match="belongs to another user"):
        claim_location(f"grpc+unix://{theirs / 'w.sock'}")


def test_a_second_worker_on_a_busy_port_leaves_the_live_ones_token(tmp_path, monkeypatch):
    """Probe 8: the busy port is refused before the model loads, and the token file is kept."""
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    location = f"grpc://127.0.0.1:{port}"
    write_token(location, live := new_token())
    with pytest.raises(SystemExit) as e:
        main(["worker", "serve", "--port", str(port)])
    assert e.value.code == 2 and read_token(location) == live
    busy.close()


def test_only_a_live_worker_holding_its_pid_file_is_stopped(tmp_path):
    """`quail worker stop` signals the process that holds a worker's pid file (worker/liveness.py),
    never the pid a stale file names; the stale file is removed."""
    import subprocess
    import sys

    from quail.worker.liveness import hold, holder, pid_path
    from quail.worker.local import stop_local_workers

    stale = tmp_path / "dead.pid"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stale.write_text(str(bystander.pid))  # a dead worker's pid, now reused by someone else
    location = f"grpc+unix://{tmp_path / 'w.sock'}"
    code = (f"import sys, time; sys.path[:0] = {sys.path!r}; from quail.worker.liveness import hold; "
            f"f = hold({location!r}); print('held', flush=True); time.sleep(60)")
    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "held"
    assert holder(pid_path(location)) == worker.pid and holder(stale) is None
    with pytest.raises(QuailError, match=f"pid {worker.pid}\\) already runs"):
        hold(location)
    assert stop_local_workers(tmp_path) == [worker.pid]
    assert worker.wait(10) != 0 and bystander.poll() is None and not stale.exists()
    bystander.kill()
