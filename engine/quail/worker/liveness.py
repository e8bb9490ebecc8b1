"""Which worker is alive, known from the kernel rather than from a file: a worker holds a lock on its
pid file for as long as it lives. A pid file that nobody locks is a dead worker's, whatever pid it
names; a locked one's holder is the worker itself (F_GETLK names it), so `quail worker stop` never
signals a process that merely reuses a dead worker's pid.

A pid file is known by what a worker writes there: its pid and nothing else, in a regular file of
this user's that no other user can write. Anything else at that path (the user's notes, a link,
another user's file) is refused, never truncated, signalled or removed."""

import fcntl
import os
import re
import stat
import struct
import tempfile
from pathlib import Path
from typing import IO

from quail.errors import QuailError
from quail.worker.tokens import beside

_FLOCK = "hhqqi4x"  # struct flock on Linux: type, whence, start, len, pid
PID = re.compile(rb"[1-9][0-9]{0,9}")  # what hold() writes: the pid, no newline


def pid_path(location: str) -> Path:
    return beside(location, ".pid")


def _pid_in(fd: int) -> int | None:
    """The pid in the open file `fd` if a worker of this user wrote it; None if it holds anything else."""
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            and st.st_size <= 10):
        return None
    text = os.pread(fd, 11, 0)
    return int(text) if PID.fullmatch(text) else None


def _open(path: Path, flags: int) -> int | None:
    """`path` opened if it is a regular file; None if it is not there, or is something else (a
    FIFO or a device is never opened: that could block, or act)."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None


def recorded(path: Path) -> int | None:
    """The pid in the pid file `path`, if a worker of this user wrote it; None for nothing, or
    anything else, there."""
    if (fd := _open(path, os.O_RDONLY)) is None:
        return None
    try:
        return _pid_in(fd)
    finally:
        os.close(fd)


def _not_ours(path: Path) -> QuailError:
    return QuailError(f"pid file {path} exists and is not one this user's worker wrote; it is left as it is: "
                      f"move it, or choose another socket or port")


def check_pid_path(location: str) -> Path:
    """The pid file's path, if what lies there may be taken over: nothing, or a pid file an earlier
    worker of this user wrote; anything else is refused, never touched."""
    path = pid_path(location)
    if os.path.lexists(path) and recorded(path) is None:
        raise _not_ours(path)
    return path


def hold(location: str) -> IO:
    """Locks the worker's pid file for the life of this process (keep the returned file open), with
    its pid written there; refused if a live worker holds it, or if something else lies there."""
    path = pid_path(location)
    try:
        while (held := _create(path) or _take_over(path, location)) is None:
            pass  # the file went or came under us (a worker exited, or another started): look again
    except OSError as e:
        raise QuailError(f"pid file {path}: {e.strerror}") from None
    return held


def _create(path: Path) -> IO | None:
    """A new pid file at `path`, locked and written before it appears there (a file being written
    would look like no worker's, and an unlocked one like a dead worker's); None if one is there."""
    if os.path.lexists(path):
        return None
    fd, new = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600
    try:
        os.write(fd, str(os.getpid()).encode())
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.link(new, path)
    except BaseException as e:
        os.close(fd)
        if isinstance(e, FileExistsError):
            return None
        raise
    finally:
        os.unlink(new)
    return open(fd, "r+")


def _take_over(path: Path, location: str) -> IO | None:
    """The pid file a dead worker of this user left at `path`, locked and rewritten with this pid;
    None if it is gone, or was replaced, meanwhile."""
    check_pid_path(location)  # refused if something else now lies there
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pid = _locker(fd)
        os.close(fd)
        raise QuailError(f"a worker (pid {pid}) already runs for {location}; stop it first "
                         f"(`quail worker stop` for the local ones)") from None
    if not _at(fd, path) or _pid_in(fd) is None:
        os.close(fd)  # removed by a worker that exited, or replaced: looked at again
        return None
    mine = str(os.getpid()).encode()
    os.pwrite(fd, mine, 0)  # digits over digits, then cut: never a file that holds anything but a pid
    os.ftruncate(fd, len(mine))
    return open(fd, "r+")


def _at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is the one at `path`."""
    try:
        here, there = os.fstat(fd), path.lstat()
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _locker(fd: int) -> int | None:
    """The pid of the process that holds a lock on the open file `fd`, or None if none does."""
    request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, request))
    return None if kind == fcntl.F_UNLCK else pid


def holder(path: Path) -> int | None:
    """The pid of the live worker that holds `path`, or None if no process does. A file no worker
    wrote names no worker, whoever locks it."""
    if (fd := _open(path, os.O_RDONLY)) is None:
        return None
    try:
        return _locker(fd) if _pid_in(fd) is not None else None
    finally:
        os.close(fd)


def release(f: IO, location: str) -> None:
    """At a clean exit: the pid file goes with the worker (a killed one's stays, unlocked, and the
    next start or stop removes it); one that replaced it meanwhile is not this worker's, and stays."""
    path = pid_path(location)
    if _at(f.fileno(), path):
        path.unlink(missing_ok=True)
    f.close()
