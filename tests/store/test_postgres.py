"""The answer store on PostgreSQL, shared by a pool of workers: the SQLite store's semantics (keys by
content, values checked, bounded least recently used first), writers that overlap at once, a
database that goes away mid-run, and a password that is never shown. A real throwaway cluster."""

import logging
import threading
from array import array

import pytest
from sqlalchemy import create_engine, text

from quail.errors import QuailError
from quail.store import answer_key, open_store
from quail.store.postgres import PostgresStore
from quail.store.signing import signer
from quail.store.sqlite import SqliteStore
from tests.postgres import throwaway_cluster

pytestmark = pytest.mark.services  # a throwaway PostgreSQL cluster per module (per xdist worker)


@pytest.fixture(scope="module")
def cluster():
    with throwaway_cluster() as c:
        yield c


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    """The key the workers that share a store are given."""
    monkeypatch.setenv("QUAIL_ANSWER_STORE_KEY", "the key the pool's workers share")


@pytest.fixture
def url(cluster):
    """The cluster's URL, with an empty store."""
    with create_engine(cluster.url()).begin() as db:
        db.execute(text("DROP TABLE IF EXISTS quail_answers, quail_schema"))
    return cluster.url()


def _items(n: int, tag: str = "", width: int = 1) -> list[tuple[bytes, list[float]]]:
    return [(answer_key("m:float32:cpu", f"q{tag}", [i]), [(i + j) / (n + width) for j in range(width)])
            for i in range(n)]


def test_the_backend_follows_the_location(tmp_path, url, monkeypatch):
    assert isinstance(open_store(str(tmp_path / "a.sqlite")), SqliteStore)
    assert isinstance(open_store(url), PostgresStore)
    monkeypatch.setenv("QUAIL_ANSWER_STORE", url)
    assert isinstance(open_store(), PostgresStore)
    for bad in ("mysql://db/quail", "postgresql+psycopg://[::"):
        with pytest.raises(QuailError, match="answer store"):
            open_store(bad)


def test_answers_come_back_by_key_as_in_sqlite_and_hold_no_document(url):
    store = open_store(url)
    items = _items(300) + _items(50, "c", width=3)
    store.put(items)
    fresh = open_store(url)  # another worker: nothing in its memory
    assert fresh.get([k for k, _ in items[:300]], 1) == dict(items[:300])
    assert fresh.get([k for k, _ in items[300:]], 3) == dict(items[300:])
    assert fresh.get([k for k, _ in items[300:]], 1) == {}  # another width is another question
    assert fresh.get([answer_key("n:float32:cpu", "q", [1])], 1) == {}
    with create_engine(url).connect() as db:
        assert db.execute(text("SELECT version FROM quail_schema")).scalars().all() == [2]
        assert db.execute(text("SELECT count(*) FROM quail_answers")).scalar() == 350
    assert fresh.stats()["answers"] == 350 and fresh.stats()["writable"]


def test_a_stored_value_that_is_not_an_answer_is_a_miss_and_is_stored_over(url, caplog):
    store = open_store(url)
    [(key, value)] = _items(1)
    store.put([(key, value)])
    with create_engine(url).begin() as db:
        db.execute(text("UPDATE quail_answers SET value = :v"), {"v": signer().seal(key, b"\x00\x00\xf8\x7f" * 2)})
    fresh = open_store(url)
    with caplog.at_level(logging.WARNING):
        assert fresh.get([key], 1) == {}
    assert "not answers" in caplog.text
    fresh.put([(key, value)])
    assert open_store(url).get([key], 1) == {key: value}


def test_the_store_is_bounded_and_forgets_the_least_recently_used(url, monkeypatch):
    monkeypatch.setattr("quail.store.postgres.BOUND_EVERY", 0.0)  # counted at every write
    store = PostgresStore(open_store(url).url, max_bytes=160 * 1000, touch_every=0)
    old = _items(600, "old")
    store.put(old)
    store.get([k for k, _ in old[:100]], 1)  # used again: kept
    store.put(_items(600, "new"))
    with create_engine(url).connect() as db:
        count = db.execute(text("SELECT count(*) FROM quail_answers")).scalar()
    assert count <= 1000
    fresh = open_store(url)
    assert len(fresh.get([k for k, _ in old[:100]], 1)) == 100
    assert len(fresh.get([k for k, _ in old[100:]], 1)) < 500


def test_four_writers_storing_overlapping_keys_at_once_lose_nothing(url, caplog):
    items = _items(4000)
    stores = [open_store(url) for _ in range(4)]
    errors = []

    def write(i: int) -> None:
        try:
            part = items[i * 700: i * 700 + 1900]  # each overlaps the next
            for lo in range(0, len(part), 250):
                stores[i].put(part[lo: lo + 250][::-1 if i % 2 else 1])  # in opposite orders
        except Exception as e:  # noqa: BLE001 - a failed writer must fail the test
            errors.append(e)

    with caplog.at_level(logging.WARNING):
        threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and "unreachable" not in caplog.text, caplog.text
    written = items[: 3 * 700 + 1900]
    assert open_store(url).get([k for k, _ in written], 1) == dict(written)


def test_a_database_that_goes_away_costs_nothing_and_storing_resumes(cluster, url, caplog, monkeypatch):
    monkeypatch.setattr("quail.store.postgres.RETRY", 0.0)
    store = open_store(cluster.url(password="s3cret-pw"))
    first, later = _items(20, "a"), _items(20, "b")
    store.put(first)
    cluster.stop()
    try:
        with caplog.at_level(logging.WARNING):
            assert store.get([k for k, _ in later], 1) == {}  # a miss: the answers are computed
            store.put(later)  # not stored, and no error
            assert store.get([k for k, _ in first], 1) == dict(first)  # what it found before, it still has
    finally:
        cluster.start()
    assert "unreachable" in caplog.text and "127.0.0.1:" in caplog.text
    store.put(later)
    assert "answers again" in caplog.text
    assert open_store(url).get([k for k, _ in later], 1) == dict(later)
    shown = caplog.text + repr(store.stats()) + store.path
    assert "s3cret-pw" not in shown and "postgres@" not in shown


def test_a_database_that_hangs_costs_a_bounded_wait_and_the_run_goes_on(cluster, url, caplog, monkeypatch):
    """#48 6: a backend stopped with SIGSTOP after the first window held the run for 121 s, until
    SIGCONT: its kernel still acknowledges, so no socket times out and statement_timeout is the
    stopped process's own. Each call is bounded on the client's side."""
    import os
    import signal
    import time

    monkeypatch.setattr("quail.store.postgres.CALL_SECONDS", 2.0)
    monkeypatch.setattr("quail.store.postgres.RETRY", 0.0)
    store = open_store(url)
    first, later = _items(20, "a"), _items(20, "b")
    store.put(first)
    with create_engine(url).connect() as db:  # the store's own connections: every backend but this one
        backends = db.execute(text("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                   "AND pid <> pg_backend_pid()")).scalars().all()
    assert backends
    for pid in backends:
        os.kill(pid, signal.SIGSTOP)
    found: list = []
    run = threading.Thread(target=lambda: (found.append(store.get([k for k, _ in later], 1)), store.put(later)))
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING):
            run.start()
            run.join(3 * 2.0 + 2)  # each call waits 2 s at most, not until SIGCONT
            assert not run.is_alive(), "the store waited on a database that hangs"
        assert found == [{}] and time.monotonic() - started < 3 * 2.0 + 2  # a miss: computed, not waited for
        assert "unreachable" in caplog.text
    finally:
        for pid in backends:
            os.kill(pid, signal.SIGCONT)
        run.join()
    assert store.get([k for k, _ in first], 1) == dict(first)
    store.close()


def test_a_url_in_a_file_is_read_only_from_a_private_file(tmp_path, url, monkeypatch):
    secret = tmp_path / "store-url"
    secret.write_text(url + "\n")
    secret.chmod(0o644)
    with pytest.raises(QuailError, match="answer_store_file .* is open to other users") as e:
        open_store(given_file=str(secret))
    assert e.value.parameter == "answer_store_file"
    monkeypatch.setenv("QUAIL_ANSWER_STORE_FILE", str(secret))
    with pytest.raises(QuailError, match="QUAIL_ANSWER_STORE_FILE .* is open to other users"):
        open_store()
    secret.chmod(0o600)
    assert isinstance(open_store(), PostgresStore)


def test_two_homes_share_the_answers_and_the_second_computes_none(tmp_path, cluster, url, tiny_model_dir,
                                                                  monkeypatch, capsys):
    """Two front ends with their own QUAIL_HOME, as two workers of a pool are: what the first computed,
    the second finds, and its output equals computing from scratch (fp32, 1e-4)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from quail.cli.main import main

    docs = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": [f"the river {i} rose by {i * 7} feet" for i in range(24)]}), docs)
    shown = tmp_path / "store-url"  # #48 11: a password on a command line is refused
    shown.write_text(cluster.url(password="s3cret-pw"))
    shown.chmod(0o600)

    def run(home: str, out: str, *extra) -> dict:
        monkeypatch.setenv("QUAIL_HOME", str(tmp_path / home))
        with pytest.raises(SystemExit) as e:
            main(["filter", str(docs), "--text-column", "text", "--predicate", "Is it about a river?", "--keep-all",
                  "--answer-store-file", str(shown), "--model", str(tiny_model_dir), "--dtype", "float32",
                  "--output", str(tmp_path / out), "--stats", str(tmp_path / f"{out}.json"), *extra])
        assert e.value.code == 0
        return json.loads((tmp_path / f"{out}.json").read_text())

    first = run("a", "a.parquet")
    second = run("b", "b.parquet")
    scratch = run("c", "c.parquet", "--no-reuse")
    assert first["tokens_computed"] > 0 and second["tokens_computed"] == 0
    assert scratch["tokens_computed"] == scratch["tokens_naive"] == first["tokens_naive"]  # no reuse: all computed
    assert second["tokens_reused"]["store"] == second["tokens_naive"] == first["tokens_naive"]
    a, b = pq.read_table(tmp_path / "b.parquet"), pq.read_table(tmp_path / "c.parquet")
    assert all(abs(x - y) < 1e-4 for x, y in zip(a.column("p_yes_1").to_pylist(), b.column("p_yes_1").to_pylist()))
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "a"))
    with pytest.raises(SystemExit):
        main(["answers", "stats", "--answer-store-file", str(shown)])
    out, err = capsys.readouterr()
    assert "postgresql://127.0.0.1:" in out and "24 answers" in out
    assert "s3cret-pw" not in out + err
    with pytest.raises(SystemExit) as e:
        main(["answers", "stats", "--answer-store", cluster.url(password="s3cret-pw")])
    assert e.value.code == 2 and "with a password is on the command line" in capsys.readouterr().err


def test_a_value_planted_by_a_role_that_can_write_the_table_is_a_miss(url, caplog):
    """The issue's repro: every value set to the bytes of 0.999 by SQL, signed or not."""
    items = [(k, [0.06 + i / 1000]) for i, (k, _) in enumerate(_items(12))]
    open_store(url).put(items)
    with create_engine(url).begin() as db:
        db.execute(text("UPDATE quail_answers SET value = :v"), {"v": array("d", [0.999]).tobytes()})
        planted = db.execute(text("SELECT key FROM quail_answers LIMIT 1")).scalar()
    store = open_store(url)
    with caplog.at_level(logging.WARNING):
        assert store.get([k for k, _ in items], 1) == {}
    assert "12 value(s) not signed" in caplog.text and store.stats()["rejected_unsigned"] == 12
    moved = signer().seal(b"another key", array("d", [0.999]).tobytes())  # a signed value, under another key
    with create_engine(url).begin() as db:
        db.execute(text("UPDATE quail_answers SET value = :v WHERE key = :k"), {"v": moved, "k": planted})
    assert open_store(url).get([planted], 1) == {}
    store.put(items)  # computed again, and stored over
    assert open_store(url).get([k for k, _ in items], 1) == dict(items)


def test_a_pool_worker_with_another_key_finds_nothing_and_says_so(url, caplog, monkeypatch):
    first = open_store(url)
    first.put(_items(5))
    monkeypatch.setenv("QUAIL_ANSWER_STORE_KEY", "the pool's other key, 32 chars.")
    other = open_store(url)
    with caplog.at_level(logging.WARNING):
        assert other.get([k for k, _ in _items(5)], 1) == {}
    assert "another QUAIL_ANSWER_STORE_KEY" in caplog.text
    assert other.stats()["key"] != first.stats()["key"]


def test_a_shared_store_needs_the_key_its_workers_share(url, monkeypatch, tmp_path):
    monkeypatch.delenv("QUAIL_ANSWER_STORE_KEY")
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    with pytest.raises(QuailError, match="is shared: give the workers that share it one key"):
        open_store(url)
    assert not (tmp_path / "home" / "answer-store.key").exists()


def test_a_store_of_unsigned_answers_is_emptied_once(url, caplog):
    open_store(url).put(_items(4))
    with create_engine(url).begin() as db:
        db.execute(text("UPDATE quail_schema SET version = 1"))
    with caplog.at_level(logging.WARNING):
        assert open_store(url).get([k for k, _ in _items(4)], 1) == {}
    assert "unsigned answers (schema version 1): emptied" in caplog.text
    with create_engine(url).connect() as db:
        assert db.execute(text("SELECT version FROM quail_schema")).scalars().all() == [2]
        assert db.execute(text("SELECT count(*) FROM quail_answers")).scalar() == 0


def test_a_store_of_a_newer_schema_is_not_used_and_the_run_goes_on(url, caplog):
    open_store(url).put(_items(3))
    with create_engine(url).begin() as db:
        db.execute(text("UPDATE quail_schema SET version = 99"))
    store = open_store(url)
    with caplog.at_level(logging.WARNING):
        assert store.get([k for k, _ in _items(3)], 1) == {}
        store.put(_items(5, "n"))
    assert "schema version 99, newer than this Quail's 2" in caplog.text
    with create_engine(url).connect() as db:
        assert db.execute(text("SELECT count(*) FROM quail_answers")).scalar() == 3  # nothing written
    from quail.cli.main import main

    with pytest.raises(SystemExit) as e:  # `quail answers clear` says it removed nothing, and fails
        main(["answers", "clear", "--answer-store", url])
    assert e.value.code == 2
    with create_engine(url).connect() as db:
        assert db.execute(text("SELECT count(*) FROM quail_answers")).scalar() == 3


@pytest.mark.parametrize("location, says", [
    ("postgresql+psycopg://quail:Qu4il@P4ss@db.example/quail", "write an '@' in the password as %40"),
    ("postgresql:/quail:P4ss@db.example/quail", "not a database URL"),
    ("postgres:quail:P4ss@db.example", "not a database URL"),
    ("P4ss", "give a path with a folder"),
])
def test_what_is_not_a_store_is_refused_and_no_password_is_shown(tmp_path, monkeypatch, location, says):
    """#48 8: an unencoded @ showed the password's tail as the host; a URL one slash short, or any
    word, became a SQLite path, making folders named after the password."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QuailError, match=says) as e:
        open_store(location)
    assert "P4ss" not in str(e.value) and list(tmp_path.iterdir()) == []


def test_the_store_is_named_where_libpq_connects():
    from quail.store.postgres import describe, postgres_url

    url = postgres_url("postgresql+psycopg://quail@/quail?host=/run/pg&port=5433")
    assert describe(url) == "postgresql:///run/pg:5433/quail"
    assert describe(postgres_url("postgresql+psycopg://quail:pw@db:6000/q")) == "postgresql://db:6000/q"


def test_a_table_of_another_shape_is_not_quails_nor_unreachable(url, caplog):
    with create_engine(url).begin() as db:
        db.execute(text("CREATE TABLE quail_answers (key text PRIMARY KEY, note text)"))
    store = open_store(url)
    with caplog.at_level(logging.WARNING):
        assert store.get([k for k, _ in _items(3)], 1) == {}
        store.put(_items(3))
    assert "answers, but not as Quail's store" in caplog.text and "unreachable" not in caplog.text
    assert not store.writable
