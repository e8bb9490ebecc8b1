"""Write-then-rename, the one way Quail writes a file that others read: into a unique temporary file
beside the target, renamed onto it only when complete, removed on any error. Readers see the old
file or the new one, never a part; two writers never share a temporary name. The new file has the
mode of the file it replaces, or, where there was none, the usual 0666 less the umask. A write that
fails (a full disk, a quota) is a QuailError naming the file and the system's reason."""

import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quail.errors import QuailError


def write_failure(path: str | Path, e: OSError) -> QuailError:
    """`cannot write PATH: No space left on device`, the errno's own text (pyarrow's strerror is a
    sentence of its own around it)."""
    return QuailError(f"cannot write {path}: {os.strerror(e.errno) if e.errno else e}")


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """An OSError of the block, which writes `path`, as write_failure."""
    try:
        yield
    except OSError as e:
        raise write_failure(path, e) from None


def _temporary(path: Path) -> Path:
    """A new empty file beside `path`, created with 0666 as open() creates files, so that the umask
    (and a folder's default ACL) apply."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """A temporary path to write; it replaces `path` when the block ends without an error, with the
    mode of the file it replaces, if any."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary(path)
    try:
        with writing(path):
            mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else None
            if mode is not None:  # no wider than the old file's, and the owner's to write meanwhile
                tmp.chmod(mode | stat.S_IRUSR | stat.S_IWUSR)
        yield tmp
        with writing(path):
            if mode is not None:
                tmp.chmod(mode)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> None:
    with replaced_atomically(path) as tmp, writing(path):
        tmp.write_text(text)


def check_writable(path: str | Path, what: str) -> None:
    """Refuses, before any work, a file that could not be written: a folder, a path under a regular
    file, a folder this user may not write in (/proc, a read-only mount). Probes the nearest
    existing folder with a temporary file, and creates nothing that stays."""
    path = Path(path)
    if path.is_dir():
        raise QuailError(f"{what} {path} is a folder")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise QuailError(f"{what} {path}: {folder} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".quail-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise QuailError(f"{what} {path}: cannot write in {folder} ({e.strerror})") from None


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file, however they are spelt: a relative path, a link, a hard
    link."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
