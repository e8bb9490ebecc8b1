"""The answer store: the model's answers, kept on disk by content, so that a document asked the same
question by the same model again (tomorrow's run of a DAG, a re-run after a crash, another
process) is not computed again.

A key is a digest of the model's identity (its weights' digest, dtype, device kind and attention), the
question's identity (the kind and the prompt's tokens after the document) and the document's
tokens. A value is the model's raw probabilities (before calibration and before any threshold),
so a changed threshold, top-k or calibration still finds them. No text is stored: only digests
and numbers.

SQLite in WAL mode: one writer and many readers across processes, crash-safe, embedded. Why, and
the figures: bench/README.md, "The answer store". A pool of workers shares one on PostgreSQL
instead (quail/answer_store_postgres.py), with the same keys, values and semantics. It is bounded
(`max_bytes`) and forgets the least recently used answers first. A store that is corrupt,
truncated or not a database is set aside and started anew; one that cannot be written (a read-only
folder, a full disk) is used as far as it can be, with a warning, and the run goes on.

What it holds becomes output, so it is trusted only when it could have been written by its user
alone: a store (or its folder, or its log) that another user owns or may write is not used, with a
warning. Every value is signed by the process that stored it (quail/answer_signing.py); one whose
signature fails, or that is not an answer (its length, finite, within [0, 1]), is a miss, computed
again and stored over, counted in `stats()` and logged.
"""

import functools
import hashlib
import logging
import os
import sqlite3
import threading
import time
from array import array
from collections.abc import Iterable
from pathlib import Path

from quail.answer_signing import Signer, signer
from quail.errors import QuailError
from quail.paths import home
from quail.trust import owned_file, private_folder

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1 << 30
SCHEMA = ("CREATE TABLE IF NOT EXISTS answers (key BLOB PRIMARY KEY, value BLOB NOT NULL, used INTEGER NOT NULL) "
          "WITHOUT ROWID", "CREATE INDEX IF NOT EXISTS answers_used ON answers (used)")
BATCH = 500  # keys per SELECT ... IN (...)
RECENT = 1 << 16  # answers found lately, kept in memory: a window's prediction and its run look up the same keys


def default_path() -> Path:
    """$QUAIL_ANSWER_STORE where it is a path, else answers.sqlite in Quail's home: shared by the CLI
    and the local workers (quail/answer_stores.py opens a database URL)."""
    given = os.environ.get("QUAIL_ANSWER_STORE", "")
    return Path(given) if given and "://" not in given else home() / "answers.sqlite"


def answer_key(model: str, question: str, document: list[int]) -> bytes:
    """model: LoadedModel.identity; question: the kind and the prompt after the document; the
    document's token ids (a join's pair: -1 between its two rows)."""
    h = _asked(model, question).copy()
    h.update(array("i", document).tobytes())
    return h.digest()


@functools.lru_cache(maxsize=64)
def _asked(model: str, question: str):
    """The key's hash with its model and question in, copied for each document: a window asks one
    question of thousands."""
    return hashlib.sha256(f"{model}\x1f{question}\x1f".encode())


class AnswerStore:
    def __init__(self, path: Path | None = None, max_bytes: int | None = None, touch_every: float = 3600.0,
                 signed_by: Signer | None = None):
        """max_bytes: by default $QUAIL_ANSWER_STORE_MAX_BYTES, else 1 GiB. touch_every: seconds; an
        answer's last use is recorded no more often, so that looking up seldom means writing.
        signed_by: by default answer_signing.signer()."""
        self.path = Path(path) if path is not None else default_path()
        self.max_bytes = max_bytes or bound_bytes()
        self.touch_ns = int(touch_every * 1e9)
        self.writable = True
        self.signed_by = signed_by
        self.rejected = Rejected()
        self._lock = threading.Lock()  # one connection, shared by the worker's job threads
        # key -> (answer, last use): answers never change under their key, so these are never stale;
        # a key not found is not kept, since another process may store it at any time
        self._recent: dict[bytes, tuple[list, int]] = {}
        self._db = self._open()

    def _open(self) -> sqlite3.Connection | None:
        try:
            self._trusted()
            self.signed_by = self.signed_by or signer()
        except QuailError as e:
            log.warning("the answer store %s is not used (%s): answers are not stored", self.path, e)
            return None
        for attempt in (1, 2):
            try:
                return self._connect()
            except sqlite3.OperationalError as e:  # a read-only folder or file, a full disk, a lock held too long
                if attempt == 1 and self._readable_only():
                    return self._read_only(e)
                log.warning("the answer store %s cannot be opened (%s): answers are not stored", self.path, e)
                return None
            except sqlite3.DatabaseError as e:  # corrupt, truncated, or not a database
                if attempt == 2:
                    log.warning("the answer store %s cannot be rebuilt (%s): answers are not stored", self.path, e)
                    return None
                self._set_aside(e)
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
        """The stored answers among `keys`, each `width` probabilities (1 for a yes/no, a classify's
        labels) or a written output (WRITTEN). `touch`: they count as used now (for the LRU bound)."""
        if self._db is None or not keys:
            return {}
        found: dict[bytes, list] = {}
        seen = Rejected()
        now = time.time_ns()
        with self._lock:
            recent = self._recent
            if len(recent) > RECENT:
                recent.clear()
            try:
                todo = [k for k in keys if k not in recent]
                for lo in range(0, len(todo), BATCH):
                    part = todo[lo : lo + BATCH]
                    rows = self._db.execute(f"SELECT key, value, used FROM answers WHERE key IN "
                                            f"({','.join('?' * len(part))})", part).fetchall()
                    for k, v, used in rows:
                        if (answer := seen.checked(self.signed_by, bytes(k), v, width)) is not None:
                            # a last use that is no time is as good as none: it is written anew
                            recent[bytes(k)] = (answer, used if type(used) is int else 0)
                stale = []
                for k in keys:
                    if (hit := recent.get(k)) is not None and fits(hit[0], width):
                        found[k] = hit[0]
                        if hit[1] < now - self.touch_ns:
                            stale.append(k)
                if touch and stale and self.writable:
                    self._db.execute("BEGIN IMMEDIATE")
                    self._db.executemany("UPDATE answers SET used = ? WHERE key = ?", [(now, k) for k in stale])
                    self._db.execute("COMMIT")
                    recent.update((k, (found[k], now)) for k in stale)
            except sqlite3.Error as e:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                self._failed("read", e)
        self.rejected.add(seen, self.path, width)
        return found

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
                self._recent.update((k, (list(v), now)) for k, v in items)
                self._bound()
            except sqlite3.Error as e:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                self._failed("write", e)

    def _sealed(self, key: bytes, answer: list) -> bytes:
        assert self.signed_by is not None  # an open store has its signer
        return self.signed_by.seal(key, array("d", answer).tobytes())

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
            self._recent.clear()  # what it holds is the store's
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # VACUUM goes through the log: empty it after

    def _failed(self, what: str, error: sqlite3.Error) -> None:
        log.warning("the answer store %s failed to %s (%s): the run goes on without it", self.path, what, error)
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
            self._recent.clear()
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


WRITTEN = 0  # the width of a written output (an extract's, a map's): truncated or not (1 or 0), then its tokens


class Rejected:
    """Stored values not used since the store was opened: `unsigned` (their signature is not this
    process's secret: planted, or stored by a worker with another secret), `damaged` (signed, yet
    not an answer: never by a worker of this Quail)."""

    def __init__(self) -> None:
        self.unsigned = 0
        self.damaged = 0

    def checked(self, signed_by: Signer | None, key: bytes, stored: object, width: int) -> list[float] | None:
        """The answer a stored value holds, or None, counted, where it holds none."""
        value = signed_by.open(key, stored) if signed_by is not None and isinstance(stored, bytes) else None
        if value is None:
            self.unsigned += 1
            return None
        if (answer := as_answer(value, width)) is None:
            self.damaged += 1
        return answer

    def add(self, seen: "Rejected", where: str | Path, width: int) -> None:
        """Counts a lookup's rejections in the store's, and logs them."""
        self.unsigned += seen.unsigned
        self.damaged += seen.damaged
        if seen.unsigned:
            log.warning("the answer store %s holds %d value(s) not signed with this process's key (planted, or "
                        "stored by a worker with another QUAIL_ANSWER_STORE_KEY): computed again", where,
                        seen.unsigned)
        if seen.damaged:
            log.warning("the answer store %s holds %d value(s) that are not answers (of %s): computed again",
                        where, seen.damaged, answer_words(width))

    def stats(self, signed_by: Signer | None) -> dict:
        return {"key": signed_by.fingerprint if signed_by else None, "rejected_unsigned": self.unsigned,
                "rejected_damaged": self.damaged}


def as_answer(value: object, width: int) -> list[float] | None:
    """A stored value as `width` probabilities, or as a written output (`WRITTEN`), or None if it
    is not one (damaged or planted)."""
    if not isinstance(value, bytes) or not value or len(value) % 8 or (width and len(value) != 8 * width):
        return None
    answer = array("d", value).tolist()
    if width == WRITTEN:
        ok = answer[0] in (0.0, 1.0) and all(t.is_integer() and 0 <= t < 1 << 31 for t in answer[1:])
        return answer if ok else None
    return answer if all(0.0 <= p <= 1.0 for p in answer) else None  # NaN is neither


def fits(answer: list[float], width: int) -> bool:
    """Whether a stored answer is of this width (any written output is of WRITTEN's)."""
    return len(answer) == width or (width == WRITTEN and len(answer) >= 1)


def answer_words(width: int) -> str:
    return "written outputs" if width == WRITTEN else f"{width} probabilities in [0, 1]"


def bound_bytes() -> int:
    value = os.environ.get("QUAIL_ANSWER_STORE_MAX_BYTES", "")
    if not value:
        return DEFAULT_MAX_BYTES
    if not value.isdigit() or int(value) < 1 << 20:
        raise QuailError(f"QUAIL_ANSWER_STORE_MAX_BYTES={value!r}: give a number of bytes, at least 1048576")
    return int(value)


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
