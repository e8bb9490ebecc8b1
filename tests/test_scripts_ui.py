"""`make stop` (scripts/ui.py) signals and removes only what this user's own `make ui` left: never a
process a planted pid file names, another user's process, or what a planted QUAIL_HOME holds."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import procs  # noqa: E402
import ui  # noqa: E402


@pytest.fixture
def sleeper():
    """A process in a session of its own, as the services are."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_pid_file_in_a_folder_others_may_write_is_never_acted_on(tmp_path, sleeper, capsys):
    folder = tmp_path / "ui"
    folder.mkdir()
    folder.chmod(0o777)
    procs.record(folder / "scheduler.pid", sleeper.pid)  # planted: pid and start time as /proc gives them
    with pytest.raises(SystemExit) as e:
        sys.argv = ["ui.py", "stop", "--home", str(tmp_path), "--timeout", "3"]
        sys.exit(ui.main())
    assert e.value.code == 2 and "is writable by other users" in capsys.readouterr().err
    assert sleeper.poll() is None and (folder / "scheduler.pid").exists()  # nothing signalled, nothing removed


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to run as another user")
def test_another_users_process_is_never_signalled_whatever_the_pid_file_says(tmp_path):
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"],
                             start_new_session=True)
    try:
        deadline = time.time() + 10
        while os.stat(f"/proc/{other.pid}").st_uid != 65534:  # setpriv has switched to the other user
            assert time.time() < deadline
            time.sleep(0.01)
        ui_folder = ui.ui_folder(tmp_path)
        procs.record(ui_folder / "scheduler.pid", other.pid)
        assert procs.recorded(ui_folder / "scheduler.pid") is None
        assert ui.stop(tmp_path, 3) == 0
        assert other.poll() is None  # still running
    finally:
        other.kill()
        other.wait()


def test_a_quail_home_others_may_write_is_refused_and_left_as_it_is(tmp_path, capsys):
    planted = tmp_path / "foreign"
    (planted / "worker").mkdir(parents=True)
    planted.chmod(0o777)
    (planted / "worker" / "unrelated.pid").write_text("1 1\n")
    ui_folder = ui.ui_folder(tmp_path / "out")
    (ui_folder / "quail_home").write_text(f"{planted}\n")
    sys.argv = ["ui.py", "stop", "--home", str(tmp_path / "out"), "--timeout", "3"]
    assert ui.main() == 2
    assert "is writable by other users" in capsys.readouterr().err
    assert (planted / "worker" / "unrelated.pid").exists()
