"""Write-then-rename, the one way Quail writes a file that others read: into a unique temporary file
beside the target, renamed onto it only when complete, removed on any error. Readers see the old
file or the new one, never a part; two writers never share a temporary name. The new file has the
mode of the file it replaces, or, where there was none, the usual 0666 less the umask. A write that
fails (a full disk, a quota) is a QuailError naming the file and the system's reason. A writer
locks its temporary file while it writes, so the next writer of that target removes what a writer
killed with -9 left. A Publication renames several outputs together, once all are complete."""

import fcntl
import glob
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator, Mapping
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


def _temporary(path: Path) -> tuple[Path, int]:
    """A new empty file beside `path`, created with 0666 as open() creates files, so that the umask
    (and a folder's default ACL) apply; and a descriptor that locks it for as long as it is being
    written, so that one a killed writer left (nobody locks it) is told apart and removed."""
    sweep(path)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:  # not swept between its creation and its lock
                return tmp, fd
        except FileNotFoundError:
            pass
        except BaseException:  # SIGTERM's SystemExit between its creation and its return
            tmp.unlink(missing_ok=True)
            os.close(fd)
            raise
        os.close(fd)


def sweep(path: Path) -> None:
    """Removes the temporary files beside `path` that writers killed with -9 left: this user's
    regular files that no live process locks."""
    try:
        found = list(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
    except OSError:
        return
    for stale in found:
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if st.st_uid == os.getuid() and stat.S_ISREG(st.st_mode):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live writer: BlockingIOError
                stale.unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            os.close(fd)


class Publication:
    """Files written whole under temporary names, which replace their targets together once every
    one is complete (`publish`): a run that fails anywhere before changes none of its outputs.
    Renames cannot fail together; should one fail, the error names the targets already replaced."""

    def __init__(self):
        self.pending: list[tuple[Path, Path, int | None, int]] = []  # temporary, target, mode, lock

    def publish(self) -> None:
        done: list[str] = []
        while self.pending:
            tmp, path, mode, fd = self.pending[0]
            try:
                if mode is not None:
                    tmp.chmod(mode)
                os.replace(tmp, path)
            except OSError as e:
                self.discard()
                replaced = f"; already replaced: {', '.join(done)}" if done else "; no output was replaced"
                raise QuailError(f"{write_failure(path, e)}{replaced}") from None
            os.close(fd)
            self.pending.pop(0)
            done.append(str(path))

    def discard(self) -> None:
        for tmp, _, _, fd in self.pending:
            tmp.unlink(missing_ok=True)
            os.close(fd)
        self.pending = []


@contextmanager
def replaced_atomically(path: str | Path, publication: Publication | None = None) -> Iterator[Path]:
    """A temporary path to write; it replaces `path` when the block ends without an error (or, with
    a publication, when that is published), with the mode of the file it replaces, if any."""
    path = Path(path)
    made: tuple[Path, int] | None = None
    handed = False
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            made = tmp, fd = _temporary(path)
        with writing(path):
            mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else None
            if mode is not None:  # no wider than the old file's, and the owner's to write meanwhile
                tmp.chmod(mode | stat.S_IRUSR | stat.S_IWUSR)
        yield tmp
        if publication is not None:
            publication.pending.append((tmp, path, mode, fd))
            handed = True
            return
        with writing(path):
            if mode is not None:
                tmp.chmod(mode)
            os.replace(tmp, path)
    finally:
        if made is not None and not handed:
            made[0].unlink(missing_ok=True)
            os.close(made[1])


def write_text_atomically(path: str | Path, text: str, publication: Publication | None = None) -> None:
    with replaced_atomically(path, publication) as tmp, writing(path):
        tmp.write_text(text)


INPUT = "one of the inputs: it would be overwritten while it is read"


def check_output(path: str | Path, what: str, claimed: Mapping[Path, str]) -> None:
    """The one rule for an output file, the CLI's and the provider's: refused, before any work, if
    it names a file the run reads or keeps (`claimed`: path -> what it is), however either is spelt,
    or if it could not be written."""
    for p, why in claimed.items():
        if same_file(path, p):
            raise QuailError(f"{what} {path} is {why}")
    check_writable(path, what)


def check_writable(path: str | Path, what: str) -> None:
    """Refuses, before any work, a file that could not be written: a folder, a path under a regular
    file, a folder this user may not write in (/proc, a read-only mount). Probes the nearest
    existing folder with a temporary file, and creates nothing that stays."""
    path = Path(path)
    if path.is_dir():
        raise QuailError(f"{what} {path} is a folder")
    if path.exists() and not path.is_file():  # a device, a FIFO, a socket: a rename would put a file in its place
        raise QuailError(f"{what} {path} is not a regular file ({_kind(path.stat().st_mode)}); Quail writes only "
                         f"regular files")
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


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a file"


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file, however they are spelt: a relative path, a link, a hard
    link."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
