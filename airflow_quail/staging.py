"""A task's finished windows, kept on disk until its whole output is written: a task retried after
the worker or the task process died resumes from the first unfinished window and writes its output
once. Each window is a Parquet file named by its number and by the digest of what it computed, with
a JSON sidecar holding its accounting; a window whose input or operator changed is computed again.

The folder sits beside a local target, and under $QUAIL_HOME/staging for SQL and object-store
targets; it is private to the user (0700) and removed once the output is in place. One that another
user owns or can write is refused (it could hold planted windows), and a window's table is reused
only if it matches the digest its sidecar recorded. The folder also keeps each window's latest job
id, so that a later try whose input changed may cancel that job (worker/protocol.py)."""

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from quail.atomic import write_text_atomically
from quail.errors import QuailError
from quail.paths import home
from quail.pipeline.stream import OutputSink
from quail.trust import private_folder
from quail.worker.jobs import Origin


class WindowStage:
    def __init__(self, target: str, local: Path | None, origin: Origin):
        key = hashlib.sha256(f"{origin.key}\x1f{target}".encode()).hexdigest()[:16]
        base = local.parent if local is not None else home() / "staging"
        name = local.name if local is not None else "output"
        self.folder = base / f".{name}.quail-{key}"

    def _files(self, k: int, digest: str) -> tuple[Path, Path, Path]:
        """The window's table, its sidecar, and its rows for review (a cascade's review_output)."""
        stem = self.folder / f"window-{k:06d}-{digest[:16]}"
        return stem.with_suffix(".parquet"), stem.with_suffix(".json"), stem.with_suffix(".review.parquet")

    def _folder(self) -> Path:
        return private_folder(self.folder)

    def done(self, k: int, digest: str) -> dict | None:
        """The staged window's record (rows counted toward a limit, stats), if it computed this."""
        if not self.folder.exists():
            return None
        table, sidecar, review = self._files(k, digest)
        self._folder()
        if not (table.exists() and sidecar.exists()):
            return None
        record = json.loads(sidecar.read_text())
        digests = record.pop("sha256", None), record.pop("review_sha256", None)
        if digests != (_sha256(table), _sha256(review) if review.exists() else None):
            raise QuailError(f"staged window {table} does not match the digest its sidecar recorded; remove "
                             f"{self.folder} to compute the task anew")
        return record

    def put(self, k: int, digest: str, table: pa.Table, record: dict, review: pa.Table | None = None) -> None:
        folder = self._folder()
        for stale in folder.glob(f"window-{k:06d}-*"):
            stale.unlink()
        path, sidecar, review_path = self._files(k, digest)
        for what, where in ((table, path), (review, review_path)):
            if what is not None:
                with OutputSink(str(where)) as sink:
                    sink.write(what)
        digests = {"sha256": _sha256(path), "review_sha256": _sha256(review_path) if review is not None else None}
        write_text_atomically(sidecar, json.dumps(record | digests))  # last: a window is done once it is there

    def job(self, k: int) -> str | None:
        """The id of the last job submitted for window k, if one was."""
        path = self.folder / f"window-{k:06d}.job"
        return path.read_text() if self.folder.exists() and self._folder() and path.exists() else None

    def put_job(self, k: int, job: str) -> None:
        write_text_atomically(self._folder() / f"window-{k:06d}.job", job)

    def tables(self, windows: list[tuple[int, str]], review: bool = False) -> Iterator[pa.Table]:
        """The staged windows' tables, or (review) their rows for review."""
        for k, digest in windows:
            yield pq.read_table(self._files(k, digest)[2 if review else 0])

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)



def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
