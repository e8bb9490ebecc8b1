"""Write-then-rename: the old file stays whole when a write fails, and no temporary file is left;
a new file has the usual mode, a replaced one keeps its own."""

import errno
import os
import re
import stat
from pathlib import Path

import pytest

from quail.atomic import replaced_atomically, write_text_atomically
from quail.errors import QuailError


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "stats.json"
    write_text_atomically(target, "old")
    with pytest.raises(ValueError), replaced_atomically(target) as tmp:
        tmp.write_text("half")
        raise ValueError("the writer broke")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["stats.json"]


def test_two_writers_never_share_a_temporary_name(tmp_path):
    target = tmp_path / "cost.json"
    with replaced_atomically(target) as a, replaced_atomically(target) as b:
        assert a != b
        a.write_text("a")
        b.write_text("b")
    assert target.read_text() == "a"  # the outer block ends last and wins; neither file is torn


def test_a_new_file_gets_0666_less_the_umask(tmp_path, umask_027):
    write_text_atomically(tmp_path / "new.json", "x")
    assert _mode(tmp_path / "new.json") == 0o640


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o664, 0o444])
def test_a_replaced_file_keeps_its_mode(tmp_path, umask_027, mode):
    target = tmp_path / "stats.json"
    target.write_text("old")
    target.chmod(mode)
    write_text_atomically(target, "new")
    assert target.read_text() == "new" and _mode(target) == mode


def test_a_full_disk_is_named_and_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "stats.json"
    write_text_atomically(target, "old")

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(QuailError, match=re.escape(f"cannot write {target}: No space left on device")):
        write_text_atomically(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["stats.json"]


def test_a_signal_between_the_temporary_files_creation_and_its_use_leaves_nothing(tmp_path, monkeypatch):
    """SIGTERM's SystemExit can land while the temporary file is being locked: it goes too."""
    def terminated(fd: int, op: int) -> None:
        raise SystemExit(143)

    monkeypatch.setattr("quail.atomic.fcntl.flock", terminated)
    with pytest.raises(SystemExit), replaced_atomically(tmp_path / "out.parquet"):
        pass
    assert list(tmp_path.iterdir()) == []
