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
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Late
from typing import TypeVar

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, ProgrammingError, SQLAlchemyError

from quail.errors import QuailError
from quail.store.base import bound_bytes
from quail.store.recent import Recent, Row
from quail.store.signing import Signer, signer
from quail.store.values import Rejected, sealed

log = logging.getLogger(__name__)
T = TypeVar("T")

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
CALL_SECONDS = 15.0  # the most one call may wait: a stopped server's kernel still acknowledges, so no socket times out
BOUND_EVERY = 60.0  # seconds between a worker's counts of the answers (a count reads the whole index)


SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # what begins a URL, and no path a user means


def postgres_url(location: str) -> URL | None:
    """The SQLAlchemy URL of a PostgreSQL store, or None where `location` is a path. What looks like
    a URL and is not one is refused, never taken for a path; no message shows what could be a
    password."""
    scheme = SCHEME.match(location)
    if "://" not in location:
        if scheme:  # postgresql:/user:PW@host/db, one slash short, would make folders named after the password
            raise QuailError(f"answer store {scheme.group()}...: not a database URL ({scheme.group()}// and the "
                             f"host); a path that begins with a word and a colon, write as ./that")
        return None
    head = location.split("://", 1)[0]
    authority = location.split("://", 1)[1].split("/", 1)[0]
    if authority.count("@") > 1:  # a password's own @ would be read as the host's start
        raise QuailError(f"answer store {head}://...: more than one '@' before the host; write an '@' in the "
                         f"password as %40")
    try:
        url = make_url(location)
    except (ArgumentError, ValueError):
        raise QuailError(f"answer store {head}://...: not a database URL") from None
    if url.get_backend_name() != "postgresql":
        raise QuailError(f"answer store {url.drivername}://...: give a path, or a postgresql+psycopg:// URL")
    return url.set(drivername="postgresql+psycopg")


def describe(url: URL) -> str:
    """The store as logs and `quail worker status` name it: backend, host and database, no user or
    password; the host and port libpq connects to, those of the query (`?host=`) where it gives them."""
    host = url.query.get("host") or url.host or "localhost"
    port = url.query.get("port") or url.port or 5432
    return f"postgresql://{host if isinstance(host, str) else ','.join(host)}:{port}/{url.database or ''}"


class PostgresStore:
    backend = "postgres"

    def __init__(self, url: URL, max_bytes: int | None = None, touch_every: float = 3600.0, pool_size: int = 4,
                 signed_by: Signer | None = None):
        """pool_size: connections kept, as many as the worker's job threads. signed_by: by default
        signing.signer(), which a pool's workers must share."""
        self.url = url
        self.path = describe(url)  # what messages name: never the password
        self.max_bytes = max_bytes or bound_bytes()
        self.writable = True
        self.unused: str | None = None
        self.signed_by = signed_by or signer(shared=self.path)
        self.rejected = Rejected()
        self.errors = 0  # calls that failed or went unanswered since it was opened
        self.recent = Recent(touch_every)
        self._lock = threading.Lock()  # guards the outage state, never a round trip
        self._down_until: float | None = None  # while it does not answer: when it is tried again
        self._ready = False
        self._bounded = 0.0  # when this worker last counted the answers
        self._engine: Engine = create_engine(url, pool_size=pool_size, max_overflow=0, pool_pre_ping=True,
                                             pool_timeout=CALL_SECONDS, connect_args={
                                                 "connect_timeout": 5, "options": "-c statement_timeout=30000"})
        # every call runs here and is waited for CALL_SECONDS at most: a database that hangs costs a
        # lookup that long, never a task (a call left waiting ends when the database answers again)
        self._calls = ThreadPoolExecutor(pool_size, thread_name_prefix="quail-store")

    def _call(self, what: str, call: Callable[[], T], otherwise: T) -> T:
        """call(), or `otherwise` where the database fails or does not answer in CALL_SECONDS (it is
        then left alone for RETRY seconds)."""
        try:
            return self._calls.submit(call).result(timeout=CALL_SECONDS)
        except Late:
            self._failed(what, TimeoutError(f"no answer in {CALL_SECONDS:.0f} s"))
        except ProgrammingError as e:  # it answers, and refuses what Quail asks: not an outage
            why = str(e.orig).splitlines()[0] if e.orig else str(e)
            log.warning("the answer store %s answers, but not as Quail's store (%s: %s): it is not used, and "
                        "answers are not stored", self.path, what, why)
            self.writable, self.unused = False, f"not Quail's store ({why})"
            self.errors += 1
            with self._lock:
                self._down_until = float("inf")
        except (SQLAlchemyError, OSError) as e:
            self._failed(what, e)
        return otherwise

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
                    self.unused = f"schema version {version}, newer than this Quail's {VERSION}"
                    return False
            self._ready = True
        return True

    def _failed(self, what: str, error: Exception) -> None:
        with self._lock:
            self.errors += 1
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
        def read() -> list[Row]:
            if not self._usable():
                return []
            found: list[Row] = []
            with self._engine.connect() as db:
                for lo in range(0, len(keys), BATCH):
                    rows = db.execute(text("SELECT key, value, used FROM quail_answers WHERE key = ANY(:keys)"),
                                      {"keys": keys[lo: lo + BATCH]}).all()
                    found += ((k, bytes(v), used) for k, v, used in rows)
            self._answered()
            return found

        nothing: list[Row] = []
        return iter(self._call("read", read, nothing))

    def _touch(self, keys: list[bytes], now: int) -> bool:
        if not self.writable:
            return False

        def touch() -> bool:
            with self._engine.begin() as db:
                for lo in range(0, len(keys), BATCH):
                    db.execute(text("UPDATE quail_answers SET used = :now WHERE key = ANY(:keys)"),
                               {"now": now, "keys": keys[lo: lo + BATCH]})
            return True

        return self._call("record use", touch, False)

    def put(self, items: Iterable[tuple[bytes, list]]) -> None:
        rows = sorted({k: v for k, v in items}.items())  # key order: overlapping writers never deadlock
        if not rows or not self.writable:
            return
        now = time.time_ns()

        def write() -> bool:
            if not self._usable():
                return False
            with self._engine.begin() as db:
                for lo in range(0, len(rows), BATCH):
                    batch = rows[lo: lo + BATCH]
                    # a value that is not an answer (damaged) is stored over; an equal one is left alone
                    db.execute(text("INSERT INTO quail_answers SELECT * FROM unnest(:keys, :values, :used) "
                                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, used = EXCLUDED.used "
                                    "WHERE quail_answers.value <> EXCLUDED.value"),
                               {"keys": [k for k, _ in batch],
                                "values": [sealed(self.signed_by, k, v) for k, v in batch],
                                "used": [now] * len(batch)})
            self._answered()
            return True

        if self._call("write", write, False):
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
        def bound() -> bool:
            with self._engine.begin() as db:
                if not db.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK}).scalar():
                    return False
                count = db.execute(text("SELECT count(*) FROM quail_answers")).scalar() or 0
                if count <= most:
                    return False
                over = count - most + most // 10
                db.execute(text("DELETE FROM quail_answers WHERE key IN "
                                "(SELECT key FROM quail_answers ORDER BY used LIMIT :n)"), {"n": over})
            return True

        if self._call("bound", bound, False):
            self.recent.clear()

    def size(self) -> int:
        """Bytes the table and its index take on disk."""
        def size() -> int:
            with self._engine.connect() as db:
                return int(db.execute(text("SELECT pg_total_relation_size('quail_answers')")).scalar() or 0)

        return self._call("size", size, 0)

    def stats(self) -> dict:
        def count() -> int | None:
            if not self._usable():
                return None
            with self._engine.connect() as db:
                return db.execute(text("SELECT count(*) FROM quail_answers")).scalar() or 0

        answers = self._call("count", count, None)
        return {"path": self.path, "answers": answers or 0, "bytes": self.size() if answers is not None else 0,
                "max_bytes": self.max_bytes, "writable": answers is not None and self.writable,
                **self.rejected.stats(self.signed_by)}

    def clear(self) -> int:
        def clear() -> int:
            if not self._usable():
                return 0
            with self._engine.begin() as db:
                n = db.execute(text("SELECT count(*) FROM quail_answers")).scalar() or 0
                db.execute(text("TRUNCATE quail_answers"))  # gives the space back at once, as DELETE does not
            return n

        n = self._call("clear", clear, 0)
        self.recent.clear()
        return n

    def close(self) -> None:
        self._calls.shutdown(wait=False, cancel_futures=True)  # a call left waiting on a hung database ends with it
        self._engine.dispose()
