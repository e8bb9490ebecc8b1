"""Which worker is alive, known from the kernel rather than from a file: a worker holds a lock on its
pid file for as long as it lives. A pid file that nobody locks is a dead worker's, whatever pid it
names; a locked one's holder is the worker itself (F_GETLK names it), so `quail worker stop` never
signals a process that merely reuses a dead worker's pid."""

import fcntl
import os
import struct
from pathlib import Path
from typing import IO

from quail.errors import QuailError
from quail.worker.tokens import beside

_FLOCK = "hhqqi4x"  # struct flock on Linux: type, whence, start, len, pid


def pid_path(location: str) -> Path:
    return beside(location, ".pid")


def hold(location: str) -> IO:
    """Locks the worker's pid file for the life of this process (keep the returned file open), and
    writes its pid there; refused if a live worker holds it."""
    path = pid_path(location)
    f = open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600), "r+")
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise QuailError(f"a worker (pid {holder(path)}) already runs for {location}; stop it first "
                         f"(`quail worker stop` for the local ones)") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def holder(path: Path) -> int | None:
    """The pid of the live worker that holds `path`, or None if no process does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, request))
    finally:
        os.close(fd)
    return None if kind == fcntl.F_UNLCK else pid


def release(f: IO, location: str) -> None:
    """At a clean exit: the pid file goes with the worker (a killed one's stays, unlocked, and the
    next start or stop removes it)."""
    pid_path(location).unlink(missing_ok=True)
    f.close()
