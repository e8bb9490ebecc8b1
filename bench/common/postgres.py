"""A throwaway PostgreSQL cluster on a loopback port, from the installed server binaries (Debian's
postgresql package), for the answer store benchmark; removed when the run ends."""

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def throwaway_cluster() -> Iterator[str]:
    """Yields the store URL of a fresh cluster's superuser (trust authentication)."""
    pg_bin = next((Path(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)
    if pg_bin is None:
        raise SystemExit("no PostgreSQL server binaries in /usr/lib/postgresql: install postgresql, or pass --url")
    data = Path(tempfile.mkdtemp(prefix="quail-bench-pg-"))
    as_pg = []
    if os.geteuid() == 0:  # initdb refuses root: the cluster is the postgres user's
        shutil.chown(data, "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctl = as_pg + [str(pg_bin / "pg_ctl"), "-D", str(data / "db")]
    subprocess.run(as_pg + [str(pg_bin / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)
    subprocess.run(ctl + ["-w", "-l", str(data / "log"), "-o", f"-p {port} -c listen_addresses=127.0.0.1 -k {data}",
                          "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(ctl + ["-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)
