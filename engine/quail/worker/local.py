"""A worker on this machine, started on demand for the embedded default and left running for the
DAG's later tasks: a detached process on a Unix socket under $QUAIL_HOME/worker, started under a
file lock so concurrent tasks never start two, gone after an idle timeout."""

import fcntl
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from quail.errors import QuailError
from quail.installed import require_engine
from quail.paths import home
from quail.store.open import store_location
from quail.trust import private_folder
from quail.worker.client import WorkerClient
from quail.worker.liveness import holder, pid_path, recorded
from quail.worker.locations import socket_path, unix_location
from quail.worker.tokens import new_token, read_token, write_token


def _state(location: str, token: str | None) -> str | None:
    """"current"; "stale" when its model's files changed since it loaded them (it is stopping); None
    when it does not answer."""
    try:
        return "current" if WorkerClient(location, token, timeout=5).info()["current"] else "stale"
    except QuailError:
        return None


def _answers(location: str, token: str | None) -> bool:
    return _state(location, token) == "current"


def _stopped(location: str, deadline: float) -> None:
    """Waits for the worker at `location` to exit (its pid file unlocked)."""
    while holder(pid_path(location)) is not None:
        if time.time() > deadline:
            raise QuailError(f"the local Quail worker at {location} did not stop in time")
        time.sleep(0.2)


def ensure_local_worker(model: str, dtype: str = "auto", arena_pages: int | None = None, device: str = "auto",
                        idle_timeout: float = 600.0, start_timeout: float = 600.0,
                        say: Callable[[str], None] = lambda _: None) -> tuple[str, str]:
    """The location and token of a running local worker for this model, started if none answers.
    Its folder is private (0700) and it admits only the holder of its token, a random one in a 0600
    file beside its socket: other local users can neither reach it nor read its results. `say`
    hears whether it was found running or started, and a started worker's start-up phases.

    Concurrent callers start exactly one worker: the check and the start happen under a lock on
    the folder, and a worker still loading (its starter gone) is waited for, not doubled. A worker
    killed while it starts is started again, until `start_timeout`. One whose model's files changed
    since it loaded them is waited for while it stops, and a new one started."""
    ident = _ident(model, dtype, arena_pages, device)
    folder = private_folder(home() / "worker")
    sock = folder / f"{ident}.sock"
    location = unix_location(sock)
    deadline = time.time() + start_timeout
    with open(folder / f"{ident}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        token = read_token(location)
        state = _state(location, token) if sock.exists() and token else None
        if state == "current" and token:
            say(f"the local Quail worker for {model} is already running ({location})")
            return location, token
        if state == "stale":
            say(f"the local Quail worker for {model} loaded files that have changed since; it is stopping, and "
                f"a new one starts on the new files")
            _stopped(location, deadline)
        require_engine("starting a local Quail worker")
        log_path = folder / f"{ident}.log"
        while True:
            phases = _PhaseReader(log_path, say)
            if (pid := holder(pid_path(location))) is not None:
                say(f"the local Quail worker for {model} (pid {pid}) is starting; waiting for it")
                proc = None
            else:
                write_token(location, token := new_token())
                proc = _start(model, dtype, arena_pages, device, idle_timeout, sock, token, log_path, say)
            if token := _wait_until_up(location, proc, pid, deadline, phases):
                return location, token
            if proc is not None and proc.returncode >= 0:  # it refused to start, rather than being killed
                raise QuailError(f"the local Quail worker exited with code {proc.returncode}; see {log_path}")
            say(f"the local Quail worker exited (code {proc.returncode if proc else 'unknown'}) before it answered; "
                f"starting it again (log: {log_path})")


def _ident(model: str, dtype: str, arena_pages: int | None, device: str) -> str:
    """What a local worker is found by: everything that changes its answers or where it keeps them
    (the answer store it opens and the key it signs with come from the environment it starts in), so
    that a task whose store differs starts a worker of its own rather than using another's store."""
    store = [store_location()] + [os.environ.get(v, "") for v in ("QUAIL_ANSWER_STORE_KEY",
                                                                  "QUAIL_ANSWER_STORE_KEY_FILE",
                                                                  "QUAIL_ANSWER_STORE_MAX_BYTES")]
    return hashlib.sha256("|".join([model, dtype, str(arena_pages), device, *store]).encode()).hexdigest()[:12]


def _start(model: str, dtype: str, arena_pages: int | None, device: str, idle_timeout: float, sock: Path,
           token: str, log_path: Path, say: Callable[[str], None]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "quail.cli", "worker", "serve", "--model", model, "--dtype", dtype,
            "--device", device, "--socket", str(sock), "--idle-timeout", str(idle_timeout)]
    if arena_pages:
        argv += ["--arena-pages", str(arena_pages)]
    say(f"starting a local Quail worker for {model} (log: {log_path})")
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                env=dict(os.environ, QUAIL_WORKER_TOKEN=token))


def _wait_until_up(location: str, proc: subprocess.Popen | None, pid: int | None, deadline: float,
                   phases: "_PhaseReader") -> str | None:
    """The worker's token once it answers; None if it exits first (a killed start). The token is
    read anew each time: a worker whose starter died was given the one its starter wrote."""
    started, sock = time.time(), socket_path(location)
    while not (sock is not None and sock.exists() and (token := read_token(location)) and _answers(location, token)):
        if (proc.poll() is not None) if proc else holder(pid_path(location)) != pid:
            phases.read()
            return None
        if time.time() > deadline:
            raise QuailError(f"the local Quail worker did not start in time; see {phases.path}")
        phases.read()
        time.sleep(0.5)
    phases.read()
    phases.say(f"the local Quail worker (pid {proc.pid if proc else pid}) answers after "
               f"{time.time() - started:.1f} s")
    return token


class _PhaseReader:
    """Passes on the start-up phases (`quail worker: ...` lines) a starting worker writes to its log."""

    def __init__(self, path: Path, say: Callable[[str], None]):
        self.path, self.say, self.offset = path, say, path.stat().st_size if path.exists() else 0

    def read(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            if line.startswith("quail worker: "):
                self.say(line.removeprefix("quail worker: "))


def local_workers() -> list[tuple[str, str]]:
    """The locations and tokens of the local workers that answer now; none is started."""
    found = [(loc, read_token(loc)) for loc in (unix_location(s) for s in sorted((home() / "worker").glob("*.sock")))]
    return [(location, token) for location, token in found if token and _answers(location, token)]


def stop_local_workers(folder: Path | None = None) -> list[int]:
    """Sends SIGTERM to the local workers started on demand (they finish their rows in flight);
    returns their process ids. Only a process that holds a worker's pid file is signalled
    (worker/liveness.py); a dead worker's pid file is removed, any other file is left as it is. A
    worker whose pid file is gone is asked to stop through its socket, with the token it wrote for
    this user."""
    import signal

    folder = folder or private_folder(home() / "worker")
    stopped = []
    for pid_file in sorted(folder.glob("*.pid")):
        if recorded(pid_file) is None:
            continue  # no worker's: neither signalled nor removed
        pid = holder(pid_file)
        if pid is None:
            pid_file.unlink(missing_ok=True)
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
        except ProcessLookupError:
            pass
    for sock in sorted(folder.glob("*.sock")):
        location = unix_location(sock)
        if (token := read_token(location)) is None:
            continue
        try:
            client = WorkerClient(location, token, timeout=5)
            if client.info().get("pid") not in stopped:
                stopped.append(client.stop())
        except QuailError:
            continue  # not a worker that answers: nothing to stop
    return stopped
