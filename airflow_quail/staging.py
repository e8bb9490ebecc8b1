"""A task's finished windows, kept on disk until its whole output is written: a task retried after
the worker or the task process died resumes from the first unfinished window and writes its output
once. Each window is a Parquet file named by its number and by the digest of what it computed, with
a JSON sidecar holding its accounting; a window whose input or operator changed is computed again.

The folder sits beside a local target, and under $QUAIL_HOME/staging for SQL and object-store
targets; it is private to the user (0700) and removed once the output is in place."""

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from quail.atomic import write_text_atomically
from quail.paths import home
from quail.pipeline.stream import OutputSink
from quail.worker.jobs import Identity


class WindowStage:
    def __init__(self, target: str, local: Path | None, identity: Identity):
        key = hashlib.sha256(f"{identity.key}\x1f{target}".encode()).hexdigest()[:16]
        base = local.parent if local is not None else home() / "staging"
        name = local.name if local is not None else "output"
        self.folder = base / f".{name}.quail-{key}"

    def _files(self, k: int, digest: str) -> tuple[Path, Path]:
        stem = self.folder / f"window-{k:06d}-{digest[:16]}"
        return stem.with_suffix(".parquet"), stem.with_suffix(".json")

    def done(self, k: int, digest: str) -> dict | None:
        """The staged window's record (rows counted toward a limit, stats), if it computed this."""
        table, record = self._files(k, digest)
        if table.exists() and record.exists():
            return json.loads(record.read_text())
        return None

    def put(self, k: int, digest: str, table: pa.Table, record: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        for stale in self.folder.glob(f"window-{k:06d}-*"):
            stale.unlink()
        path, sidecar = self._files(k, digest)
        with OutputSink(str(path)) as sink:
            sink.write(table)
        write_text_atomically(sidecar, json.dumps(record))  # last: a window is done once both are there

    def tables(self, windows: list[tuple[int, str]]) -> Iterator[pa.Table]:
        for k, digest in windows:
            yield pq.read_table(self._files(k, digest)[0])

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
