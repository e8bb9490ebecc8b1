"""The answer store on PostgreSQL, which a pool of workers shares: an answer one worker computed is
found by every other, so tomorrow's run finds today's answers on whichever worker it lands, and a
worker lost takes none with it. Same keys, values and semantics as the SQLite store (sqlite.py);
made for many writers at once:

- one round trip per batch of keys (`key = ANY(:keys)`), never one per row;
- inserts that tolerate another worker storing the same key at the same moment (`ON CONFLICT`),
  in key order, so that two writers of overlapping batches never deadlock;
- the bound enforced by one worker at a time, under a transaction-level advisory lock;
- the schema made on first use, with a version row that a later change migrates from.

A database that does not answer costs no task: lookups miss, answers are computed, the log says
the store is unreachable (once per outage), and storing resumes when it answers again. The URL's
password is never logged: give it by libpq's own means (PGPASSWORD, or a PGPASSFILE that libpq
refuses unless it is private), or in the URL."""

import logging
import threading
import time
from collections.abc import Iterable, Iterator

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from quail.errors import QuailError
from quail.store.base import bound_bytes
from quail.store.recent import Recent, Row
from quail.store.signing import Signer, signer
from quail.store.values import Rejected, sealed

log = logging.getLogger(__name__)

VERSION = 2  # 2: values signed (signing.py); version 1's are emptied, since none would verify
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS quail_schema (version integer NOT NULL)",
    "CREATE TABLE IF NOT EXISTS quail_answers (key bytea PRIMARY KEY, value bytea NOT NULL, used bigint NOT NULL)",
    "CREATE INDEX IF NOT EXISTS quail_answers_used ON quail_answers (used)",
)
BATCH = 20000  # keys per statement: a window's at once (bench/micro/answer_store.py: the fewer round trips the faster)
BYTES_PER_ANSWER = 170  # a yes/no answer's row, index entries and tuple headers (bench/micro/answer_store.py: 166)
LOCK = 0x5175_6169_6C00  # the advisory lock of eviction ("Quail")
RETRY = 30.0  # seconds between tries of a database that did not answer
BOUND_EVERY = 60.0  # seconds between a worker's counts of the answers (a count reads the whole index)


def postgres_url(location: str) -> URL | None:
    """The SQLAlchemy URL of a PostgreSQL store, or None where `location` is a path."""
    if "://" not in location:
        return None
    try:
        url = make_url(location)
    except (ArgumentError, ValueError):
        raise QuailError(f"answer store {location.split('://')[0]}://...: not a database URL") from None
    if url.get_backend_name() != "postgresql":
        raise QuailError(f"answer store {url.drivername}://...: give a path, or a postgresql+psycopg:// URL")
    return url.set(drivername="postgresql+psycopg")


def describe(url: URL) -> str:
    """The store as logs and `quail worker status` name it: backend, host and database, no user or password."""
    return f"postgresql://{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"


class PostgresStore:
    def __init__(self, url: URL, max_bytes: int | None = None, touch_every: float = 3600.0, pool_size: int = 4,
                 signed_by: Signer | None = None):
        """pool_size: connections kept, as many as the worker's job threads. signed_by: by default
        signing.signer(), which a pool's workers must share."""
        self.url = url
        self.path = describe(url)  # what messages name: never the password
        self.max_bytes = max_bytes or bound_bytes()
        self.writable = True
        self.signed_by = signed_by or signer(shared=self.path)
        self.rejected = Rejected()
        self.recent = Recent(touch_every)
        self._lock = threading.Lock()  # guards the outage state, never a round trip
        self._down_until: float | None = None  # while it does not answer: when it is tried again
        self._ready = False
        self._bounded = 0.0  # when this worker last counted the answers
        # a database that hangs costs a lookup 30 s at most, never a task
        self._engine: Engine = create_engine(url, pool_size=pool_size, max_overflow=0, pool_pre_ping=True,
                                             pool_timeout=30, connect_args={"connect_timeout": 5,
                                                                            "options": "-c statement_timeout=30000"})

    def _usable(self) -> bool:
        with self._lock:
            # not writable: a schema newer than this Quail's, never used
            if not self.writable or (self._down_until is not None and time.monotonic() < self._down_until):
                return False
        if not self._ready:
            with self._engine.begin() as db:
                db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK})  # one creator at a time
                for statement in SCHEMA:
                    db.execute(text(statement))
                version = db.execute(text("SELECT max(version) FROM quail_schema")).scalar()
                if version is None:
                    db.execute(text("INSERT INTO quail_schema VALUES (:v)"), {"v": VERSION})
                elif version == 1:
                    db.execute(text("TRUNCATE quail_answers"))
                    db.execute(text("UPDATE quail_schema SET version = :v"), {"v": VERSION})
                    log.warning("the answer store %s held unsigned answers (schema version 1): emptied, and its "
                                "answers are stored signed from now on", self.path)
                elif version > VERSION:
                    log.warning("the answer store %s has schema version %d, newer than this Quail's %d: it is not "
                                "used, and answers are not stored; upgrade Quail", self.path, version, VERSION)
                    self.writable = False
                    return False
            self._ready = True
        return True

    def _failed(self, what: str, error: Exception) -> None:
        with self._lock:
            first, self._down_until = self._down_until is None, time.monotonic() + RETRY
        if first:
            log.warning("the answer store %s is unreachable (%s: %s): the run goes on without it, and tries "
                        "again every %.0f s", self.path, what, type(error).__name__, RETRY)

    def _answered(self) -> None:
        with self._lock:
            back, self._down_until = self._down_until is not None, None
        if back:
            log.warning("the answer store %s answers again: storing resumes", self.path)

    def get(self, keys: list[bytes], width: int, touch: bool = True) -> dict[bytes, list]:
        if not keys:
            return {}
        found, seen = self.recent.get(keys, width, self.signed_by, self._read, self._touch if touch else None)
        self.rejected.add(seen, self.path, width)
        return found

    def _read(self, keys: list[bytes]) -> Iterator[Row]:
        try:
            if not self._usable():
                return
            with self._engine.connect() as db:
                for lo in range(0, len(keys), BATCH):
                    rows = db.execute(text("SELECT key, value, used FROM quail_answers WHERE key = ANY(:keys)"),
                                      {"keys": keys[lo: lo + BATCH]}).all()
                    yield from ((k, bytes(v), used) for k, v, used in rows)
            self._answered()
        except (SQLAlchemyError, OSError) as e:
            self._failed("read", e)

    def _touch(self, keys: list[bytes], now: int) -> bool:
        if not self.writable:
            return False
        try:
            with self._engine.begin() as db:
                for lo in range(0, len(keys), BATCH):
                    db.execute(text("UPDATE quail_answers SET used = :now WHERE key = ANY(:keys)"),
                               {"now": now, "keys": keys[lo: lo + BATCH]})
            return True
        except (SQLAlchemyError, OSError) as e:
            self._failed("record use", e)
            return False

    def put(self, items: Iterable[tuple[bytes, list]]) -> None:
        rows = sorted({k: v for k, v in items}.items())  # key order: overlapping writers never deadlock
        if not rows or not self.writable:
            return
        now = time.time_ns()
        try:
            if not self._usable():
                return
            with self._engine.begin() as db:
                for lo in range(0, len(rows), BATCH):
                    part = rows[lo: lo + BATCH]
                    # a value that is not an answer (damaged) is stored over; an equal one is left alone
                    db.execute(text("INSERT INTO quail_answers SELECT * FROM unnest(:keys, :values, :used) "
                                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, used = EXCLUDED.used "
                                    "WHERE quail_answers.value <> EXCLUDED.value"),
                               {"keys": [k for k, _ in part], "values": [sealed(self.signed_by, k, v) for k, v in part],
                                "used": [now] * len(part)})
            self._answered()
        except (SQLAlchemyError, OSError) as e:
            self._failed("write", e)
            return
        self.recent.put(rows, now)
        self._bound()

    def _bound(self) -> None:
        """Forgets the least recently used answers while the store holds more than max_bytes' worth;
        one worker at a time (the others skip: it is being done)."""
        most = max(1, self.max_bytes // BYTES_PER_ANSWER)
        with self._lock:
            if time.monotonic() < self._bounded + BOUND_EVERY:
                return
            self._bounded = time.monotonic()
        try:
            with self._engine.begin() as db:
                if not db.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK}).scalar():
                    return
                count = db.execute(text("SELECT count(*) FROM quail_answers")).scalar() or 0
                if count <= most:
                    return
                over = count - most + most // 10
                db.execute(text("DELETE FROM quail_answers WHERE key IN "
                                "(SELECT key FROM quail_answers ORDER BY used LIMIT :n)"), {"n": over})
            self.recent.clear()
        except (SQLAlchemyError, OSError) as e:
            self._failed("bound", e)

    def size(self) -> int:
        """Bytes the table and its index take on disk."""
        try:
            with self._engine.connect() as db:
                return int(db.execute(text("SELECT pg_total_relation_size('quail_answers')")).scalar() or 0)
        except (SQLAlchemyError, OSError):
            return 0

    def stats(self) -> dict:
        count, reachable = 0, False
        try:
            if self._usable():
                with self._engine.connect() as db:
                    count = db.execute(text("SELECT count(*) FROM quail_answers")).scalar() or 0
                reachable = True
        except (SQLAlchemyError, OSError) as e:
            self._failed("count", e)
        return {"path": self.path, "answers": count, "bytes": self.size() if reachable else 0,
                "max_bytes": self.max_bytes, "writable": reachable and self.writable,
                **self.rejected.stats(self.signed_by)}

    def clear(self) -> int:
        try:
            if not self._usable():
                return 0
            with self._engine.begin() as db:
                n = db.execute(text("SELECT count(*) FROM quail_answers")).scalar() or 0
                db.execute(text("TRUNCATE quail_answers"))  # gives the space back at once, as DELETE does not
        except (SQLAlchemyError, OSError) as e:
            self._failed("clear", e)
            return 0
        self.recent.clear()
        return n

    def close(self) -> None:
        self._engine.dispose()
