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
from quail.paths import home
from quail.worker.client import WorkerClient
from quail.worker.locations import unix_location
from quail.worker.tokens import new_token, read_token


def _answers(location: str, token: str | None) -> bool:
    try:
        WorkerClient(location, token, timeout=5).status()
        return True
    except QuailError:
        return False


def ensure_local_worker(model: str, dtype: str = "auto", arena_pages: int | None = None, device: str = "auto",
                        idle_timeout: float = 600.0, start_timeout: float = 600.0,
                        say: Callable[[str], None] = lambda _: None) -> tuple[str, str]:
    """The location and token of a running local worker for this model, started if none answers.
    Its folder is private (0700) and it admits only the holder of its token, a random one in a 0600
    file beside its socket: other local users can neither reach it nor read its results. `say`
    hears whether it was found running or started, and a started worker's start-up phases."""
    ident = hashlib.sha256(f"{model}|{dtype}|{arena_pages}|{device}".encode()).hexdigest()[:12]
    folder = home() / "worker"
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    sock = folder / f"{ident}.sock"
    location = unix_location(sock)
    with open(folder / f"{ident}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        token = read_token(location)
        if sock.exists() and token and _answers(location, token):
            say(f"the local Quail worker for {model} is already running ({location})")
            return location, token
        token = new_token(location)  # a stale socket goes when the worker claims it; a live one is refused
        argv = [sys.executable, "-m", "quail.cli", "worker", "serve", "--model", model, "--dtype", dtype,
                "--device", device, "--socket", str(sock), "--idle-timeout", str(idle_timeout)]
        if arena_pages:
            argv += ["--arena-pages", str(arena_pages)]
        log_path = folder / f"{ident}.log"
        log = open(log_path, "ab")
        phases = _PhaseReader(log_path, say)
        say(f"starting a local Quail worker for {model} (log: {log_path})")
        started = time.time()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                env=dict(os.environ, QUAIL_WORKER_TOKEN=token))
        (folder / f"{ident}.pid").write_text(str(proc.pid))
        deadline = time.time() + start_timeout
        while not (sock.exists() and _answers(location, token)):
            if proc.poll() is not None:
                raise QuailError(f"the local Quail worker exited with code {proc.returncode}; "
                                 f"see {log_path}")
            if time.time() > deadline:
                raise QuailError(f"the local Quail worker did not start in {start_timeout:.0f} s; "
                                 f"see {log_path}")
            phases.read()
            time.sleep(0.5)
        phases.read()
        say(f"the local Quail worker (pid {proc.pid}) answers after {time.time() - started:.1f} s")
    return location, token


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
    returns the process ids that were still running."""
    import signal

    stopped = []
    for pid_file in sorted((folder or home() / "worker").glob("*.pid")):
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
        except ProcessLookupError:
            pass
        pid_file.unlink(missing_ok=True)
    return stopped
