"""The answer store in an embedded SQLite file: the model's answers, kept on disk by content, so that
a document asked the same question by the same model again (tomorrow's run of a DAG, a re-run after a
crash, another process) is not computed again. A value is the model's raw probabilities (before
calibration and before any threshold), so a changed threshold, top-k or calibration still finds them.
No text is stored: only digests and numbers.

SQLite in WAL mode: one writer and many readers across processes, crash-safe, embedded. Why, and
the figures: bench/README.md, "The answer store". A pool of workers shares one on PostgreSQL
instead (postgres.py), with the same keys, values and semantics. It is bounded (`max_bytes`) and
forgets the least recently used answers first. A store that is corrupt, truncated or not a database
is set aside and started anew; one that cannot be written (a read-only folder, a full disk) is used
as far as it can be, with a warning, and the run goes on.

What it holds becomes output, so it is trusted only when it could have been written by its user
alone: a store (or its folder, or its log) that another user owns or may write is not used, with a
warning. Every value is signed by the process that stored it (signing.py); one whose signature
fails, or that is not an answer (its length, finite, within [0, 1]), is a miss, computed again and
stored over, counted in `stats()` and logged.
"""

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from quail.errors import QuailError
from quail.paths import home
from quail.store.base import bound_bytes
from quail.store.recent import Recent, Row
from quail.store.signing import Signer, signer
from quail.store.values import Rejected, sealed
from quail.trust import owned_file, private_folder

log = logging.getLogger(__name__)

SCHEMA = ("CREATE TABLE IF NOT EXISTS answers (key BLOB PRIMARY KEY, value BLOB NOT NULL, used INTEGER NOT NULL) "
          "WITHOUT ROWID", "CREATE INDEX IF NOT EXISTS answers_used ON answers (used)")
BATCH = 500  # keys per SELECT ... IN (...)


def default_path() -> Path:
    """$QUAIL_ANSWER_STORE where it is a path, else answers.sqlite in Quail's home: shared by the CLI
    and the local workers (open.py opens a database URL)."""
    given = os.environ.get("QUAIL_ANSWER_STORE", "")
    return Path(given) if given and "://" not in given else home() / "answers.sqlite"


class SqliteStore:
    backend = "sqlite"

    def __init__(self, path: Path | None = None, max_bytes: int | None = None, touch_every: float = 3600.0,
                 signed_by: Signer | None = None):
        """max_bytes: by default $QUAIL_ANSWER_STORE_MAX_BYTES, else 1 GiB. touch_every: seconds; an
        answer's last use is recorded no more often, so that looking up seldom means writing.
        signed_by: by default signing.signer()."""
        self.path = Path(path) if path is not None else default_path()
        self.max_bytes = max_bytes or bound_bytes()
        self.writable = True
        self.signed_by = signed_by
        self.rejected = Rejected()
        self.errors = 0  # calls that failed since it was opened
        self.recent = Recent(touch_every)
        self._lock = threading.Lock()  # one connection, shared by the worker's job threads
        self.unused: str | None = None
        self._db = self._open()

    def _open(self) -> sqlite3.Connection | None:
        try:
            self._trusted()
            self.signed_by = self.signed_by or signer()
        except QuailError as e:
            return self._not_used("is not used", e)
        for attempt in (1, 2):
            try:
                return self._connect()
            except sqlite3.OperationalError as e:  # a read-only folder or file, a full disk, a lock held too long
                if attempt == 1 and self._readable_only():
                    return self._read_only(e)
                return self._not_used("cannot be opened", e)
            except sqlite3.DatabaseError as e:  # corrupt, truncated, or not a database
                if attempt == 2:
                    return self._not_used("cannot be rebuilt", e)
                self._set_aside(e)
        return None

    def _not_used(self, what: str, error: Exception) -> sqlite3.Connection | None:
        """No connection, and why, here and wherever a run reports (its summary, its stats)."""
        self.unused = f"{what}: {error}"
        log.warning("the answer store %s %s (%s): answers are not stored", self.path, what, error)
        return None

    def _trusted(self) -> None:
        """Refuses a store that another user owns or may write (quail/trust.py); a new one is made
        0600 in a folder made 0700, so that a umask never makes it one."""
        private_folder(self.path.parent)
        for path in (Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            owned_file(path, kind="answer store file")
        if not owned_file(self.path, kind="answer store"):
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            except FileExistsError:
                owned_file(self.path, kind="answer store")  # made meanwhile: by whom?
            except OSError:
                pass  # a read-only folder: _open says so

    def _connect(self) -> sqlite3.Connection:
        """A connection in WAL mode with the schema in place. Two processes opening a new store at
        once contend for its first writes: the loser waits and tries again, within 30 s."""
        deadline = time.monotonic() + 30
        while True:
            db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # in WAL mode still safe against a killed process
                if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                    raise sqlite3.DatabaseError("quick_check failed")
                for statement in SCHEMA:
                    db.execute(statement)
                return db
            except sqlite3.OperationalError as e:
                db.close()
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            except BaseException:
                db.close()
                raise

    def _readable_only(self) -> bool:
        return self.path.exists() and not _writable(self.path)

    def _read_only(self, error: sqlite3.OperationalError) -> sqlite3.Connection | None:
        log.warning("the answer store %s is read-only (%s): answers are looked up, not stored", self.path, error)
        self.writable = False
        try:
            return sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        except sqlite3.Error:
            return None

    def _set_aside(self, error: sqlite3.DatabaseError) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d%H%M%S')}")
        log.warning("the answer store %s is damaged (%s): set aside as %s and started anew", self.path, error,
                    aside.name)
        self.path.replace(aside)
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def get(self, keys: list[bytes], width: int, touch: bool = True) -> dict[bytes, list]:
        if self._db is None or not keys:
            return {}
        with self._lock:
            found, seen = self.recent.get(keys, width, self.signed_by, self._read, self._touch if touch else None)
        self.rejected.add(seen, self.path, width)
        return found

    def _read(self, keys: list[bytes]) -> Iterator[Row]:
        assert self._db is not None  # get asks an open store only
        try:
            for lo in range(0, len(keys), BATCH):
                batch = keys[lo : lo + BATCH]
                yield from self._db.execute(f"SELECT key, value, used FROM answers WHERE key IN "
                                            f"({','.join('?' * len(batch))})", batch).fetchall()
        except sqlite3.Error as e:
            self._failed("read", e)

    def _touch(self, keys: list[bytes], now: int) -> bool:
        if self._db is None or not self.writable:
            return False
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("UPDATE answers SET used = ? WHERE key = ?", [(now, k) for k in keys])
            self._db.execute("COMMIT")
            return True
        except sqlite3.Error as e:
            self._rolled_back()
            self._failed("read", e)
            return False

    def put(self, items: Iterable[tuple[bytes, list]]) -> None:
        items = list(items)
        if self._db is None or not self.writable or not items:
            return
        now = time.time_ns()
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?, ?)",
                                     [(k, self._sealed(k, v), now) for k, v in items])
                self._db.execute("COMMIT")
                self.recent.put(items, now)
                self._bound()
            except sqlite3.Error as e:
                self._rolled_back()
                self._failed("write", e)

    def _sealed(self, key: bytes, answer: list) -> bytes:
        assert self.signed_by is not None  # an open store has its signer
        return sealed(self.signed_by, key, answer)

    def _bound(self) -> None:
        """Forgets the least recently used answers while the store is larger than max_bytes."""
        db = self._db
        if db is None:
            return
        if self.size() > self.max_bytes:  # a log not yet folded in is no answer to forget
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        while (size := self.size()) > self.max_bytes:
            count = db.execute("SELECT count(*) FROM answers").fetchone()[0]
            if not count:
                return
            over = max(1, int(count * (size - self.max_bytes) / size) + count // 10)
            db.execute("DELETE FROM answers WHERE key IN (SELECT key FROM answers ORDER BY used LIMIT ?)",
                       (over,))
            self.recent.clear()
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # VACUUM goes through the log: empty it after

    def _rolled_back(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def _failed(self, what: str, error: sqlite3.Error) -> None:
        log.warning("the answer store %s failed to %s (%s): the run goes on without it", self.path, what, error)
        self.errors += 1
        self.writable = False

    def size(self) -> int:
        """Bytes on disk: the database and its write-ahead log."""
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    def stats(self) -> dict:
        count = 0
        if self._db is not None:
            with self._lock:
                count = self._db.execute("SELECT count(*) FROM answers").fetchone()[0]
        return {"path": str(self.path), "answers": count, "bytes": self.size(), "max_bytes": self.max_bytes,
                "writable": self._db is not None and self.writable, **self.rejected.stats(self.signed_by)}

    def clear(self) -> int:
        if self._db is None or not self.writable:
            return 0
        with self._lock:
            n = self._db.execute("DELETE FROM answers").rowcount
            self.recent.clear()
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
