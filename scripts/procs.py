"""The processes `make ui` starts, known by pid files: each leads a session of its own, and is stopped
with everything under it, in a bounded time."""

import os
import signal
import time
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (the state first), or None for no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()


def started(pid: int) -> str | None:
    """When the process started (clock ticks since boot), or None if it has ended: with the pid, this
    names one process, not a later one that reuses the pid."""
    fields = _stat(pid)
    return fields[19] if fields and fields[0] not in ("Z", "X") else None


def record(pid_file: Path, pid: int) -> None:
    pid_file.write_text(f"{pid} {started(pid)}\n")


def recorded(pid_file: Path) -> int | None:
    """The pid a pid file names, while that very process runs and is this user's: never another
    user's process, whatever a file says."""
    try:
        pid, start = pid_file.read_text().split()
        mine = os.stat(f"/proc/{int(pid)}").st_uid == os.getuid()
    except (OSError, ValueError):
        return None
    return int(pid) if mine and started(int(pid)) == start else None


def descendants(pids: set[int]) -> set[int]:
    """Every running process under `pids` (children, theirs, and so on)."""
    parent = {int(p.name): int(f[1]) for p in Path("/proc").iterdir()
              if p.name.isdigit() and (f := _stat(int(p.name))) and f[0] not in ("Z", "X")}
    found, more = set(), set(pids)
    while more:
        found |= more
        more = {p for p, pp in parent.items() if pp in more} - found
    return found - pids


def stop(leaders: list[int], timeout: float) -> dict[int, str]:
    """SIGTERM to each leader, then to its process group, then SIGKILL to the groups and to every
    process seen under them; returns the processes stopped, by pid. The leader is signalled alone
    first because each stops its own children: signalling a scheduler's whole group at once races the
    LocalExecutor's shutdown, whose pool then waits forever for workers that died first."""
    seen = {pid: started(pid) for pid in leaders}
    deadline = time.time() + timeout
    for group, until in ((False, deadline - timeout / 3), (True, deadline)):
        for leader in leaders:
            _signal(leader, signal.SIGTERM, group)
        while time.time() < until and _running(seen):
            time.sleep(0.5)
    for leader in leaders:
        _signal(leader, signal.SIGKILL, group=True)
    for pid in _running(seen):  # under a leader, but outside its group
        _signal(pid, signal.SIGKILL, group=False)
    return seen


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _running(seen: dict[int, str]) -> set[int]:
    """Those of `seen` still running, after adding to `seen` what now runs under them."""
    running = {pid for pid, start in seen.items() if start is not None and started(pid) == start}
    for pid in descendants(running) - set(seen):
        seen[pid] = started(pid)
        running.add(pid)
    return running
