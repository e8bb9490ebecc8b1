"""Write-then-rename, the one way Quail writes a file that others read: into a unique temporary file
beside the target, renamed onto it only when complete, removed on any error. Readers see the old
file or the new one, never a part; two writers never share a temporary name."""

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quail.errors import QuailError


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """A temporary path to write; it replaces `path` when the block ends without an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> None:
    with replaced_atomically(path) as tmp:
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
