"""A throwaway PostgreSQL cluster on a loopback port, owned by the postgres user (pytest's own
temporary folders are private to root, so it lives in a folder of its own). It can be stopped and
started again, as a database that goes away mid-run does."""

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Cluster:
    port: int
    data: Path
    bin: Path
    as_pg: list[str]

    def _ctl(self, *args: str) -> None:
        subprocess.run(self.as_pg + [str(self.bin / "pg_ctl"), "-D", str(self.data / "db"), *args], check=True,
                       capture_output=True)

    def start(self) -> None:
        self._ctl("-w", "-l", str(self.data / "log"), "-o",
                  f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}", "start")

    def stop(self) -> None:
        self._ctl("-m", "fast", "-w", "stop")

    def url(self, password: str = "") -> str:
        """A store URL for the cluster's superuser; the trust authentication ignores a password."""
        return f"postgresql+psycopg://postgres{':' + password if password else ''}@127.0.0.1:{self.port}/postgres"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    pg_bin = next((Path(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)
    if pg_bin is None or shutil.which("runuser") is None:
        pytest.skip("PostgreSQL server binaries are not installed (.ci/run installs them)")
    data = Path(tempfile.mkdtemp(prefix="quail-pg-"))
    shutil.chown(data, "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(as_pg + [str(pg_bin / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)
    cluster = Cluster(_free_port(), data, pg_bin, as_pg)
    cluster.start()
    try:
        yield cluster
    finally:
        subprocess.run(as_pg + [str(pg_bin / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(data, ignore_errors=True)
