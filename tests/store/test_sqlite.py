"""The answer store in SQLite: answers kept by content (model, question, document), found again by a
later run with the same answers, never by one that asks something else; and a store that is damaged,
read-only or shared is never trusted blindly nor a reason to fail a run."""

import json
import logging
import multiprocessing
import random
import sqlite3
from array import array

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.store import answer_key
from quail.store.signing import Signer, signer
from quail.store.sqlite import SqliteStore


def _put_and_get(store: SqliteStore, n: int, tag: str = "") -> dict:
    items = [(answer_key("m:float32:cpu", f"q{tag}", [i]), [i / n]) for i in range(n)]
    store.put(items)
    return store.get([k for k, _ in items], 1)


def test_answers_come_back_by_their_key_and_only_by_it(tmp_path):
    store = SqliteStore(tmp_path / "a.sqlite")
    key = answer_key("m:float32:cpu", "filter\x1f[1, 2]", [5, 6, 7])
    store.put([(key, [0.25])])
    assert store.get([key], 1) == {key: [0.25]}
    for other in (answer_key("m:bfloat16:cpu", "filter\x1f[1, 2]", [5, 6, 7]),  # another dtype
                  answer_key("n:float32:cpu", "filter\x1f[1, 2]", [5, 6, 7]),  # another model
                  answer_key("m:float32:cpu", "filter\x1f[1, 3]", [5, 6, 7]),  # another question
                  answer_key("m:float32:cpu", "filter\x1f[1, 2]", [5, 6, 8])):  # another document
        assert store.get([other], 1) == {}
    assert b"5, 6, 7" not in (tmp_path / "a.sqlite").read_bytes()  # digests only, no document


@pytest.mark.parametrize("damage", [b"", b"SQLite format 3\x00" + b"\x00" * 40, b"not a database at all" * 50])
def test_a_damaged_store_is_set_aside_and_started_anew(tmp_path, caplog, damage):
    path = tmp_path / "a.sqlite"
    if damage:
        path.write_bytes(damage)
    else:
        _put_and_get(SqliteStore(path), 10)
        path.write_bytes(path.read_bytes()[:1500])  # truncated
    with caplog.at_level(logging.WARNING):
        store = SqliteStore(path)
    assert len(_put_and_get(store, 10)) == 10
    if damage or "damaged" in caplog.text:
        assert "set aside" in caplog.text and list(tmp_path.glob("a.sqlite.corrupt-*"))


def test_a_read_only_store_is_read_and_a_run_goes_on(tmp_path, caplog):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    folder = tmp_path / "ro"
    folder.mkdir()
    _put_and_get(SqliteStore(folder / "a.sqlite"), 5)
    folder.chmod(0o555)
    try:
        with caplog.at_level(logging.WARNING):
            store = SqliteStore(folder / "a.sqlite")
        assert len(_put_and_get(store, 5)) == 5 and not store.writable and "read-only" in caplog.text
    finally:
        folder.chmod(0o755)


def test_an_unwritable_folder_only_warns(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING):
        store = SqliteStore(blocker / "a.sqlite")
    assert _put_and_get(store, 3) == {} and "answers are not stored" in caplog.text


def _writer(path: str, tag: str) -> None:
    store = SqliteStore(path)
    for lo in range(0, 400, 40):
        store.put([(answer_key("m", tag, [i]), [i / 400]) for i in range(lo, lo + 40)])


@pytest.mark.services  # four spawned Python processes
def test_processes_share_one_store_even_when_they_create_it_at_once(tmp_path):
    path = str(tmp_path / "a.sqlite")
    procs = [multiprocessing.get_context("spawn").Process(target=_writer, args=(path, t)) for t in "abcd"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = SqliteStore(path)
    for tag in "abcd":
        assert len(store.get([answer_key("m", tag, [i]) for i in range(400)], 1)) == 400
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_store_is_bounded_and_forgets_the_least_recently_used(tmp_path):
    store = SqliteStore(tmp_path / "a.sqlite", max_bytes=400_000, touch_every=0)
    first = [(answer_key("m", "q", [i]), [0.5] * 8) for i in range(200)]
    store.put(first)
    for lo in range(1000, 9000, 500):
        store.get([k for k, _ in first[:20]], 8)  # used again and again: kept
        store.put([(answer_key("m", "q", [i]), [0.5] * 8) for i in range(lo, lo + 500)])
    assert store.size() <= 400_000
    assert len(store.get([k for k, _ in first[:20]], 8)) == 20 and len(store.get([k for k, _ in first[20:]], 8)) < 180
    assert store.clear() > 0 and store.stats()["answers"] == 0


@pytest.fixture
def docs(tmp_path):
    rng = random.Random(3)
    words = "river stone cloud market engine garden orbit signal match goal rates".split()
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": list(range(40)), "text": [" ".join(rng.choices(words, k=rng.randint(8, 30)))
                                                             for _ in range(40)]}), path)
    return path


def _run(tmp_path, tiny_model_dir, *argv) -> dict:
    stats = tmp_path / "s.json"
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv] + ["--model", str(tiny_model_dir), "--dtype", "float32", "--stats", str(stats)])
    assert e.value.code == 0
    s = json.loads(stats.read_text())
    assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
    return s


def _close(a, b, columns):
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.num_rows == tb.num_rows and ta.column_names == tb.column_names
    for c in columns:
        for x, y in zip(ta.column(c).to_pylist(), tb.column(c).to_pylist()):
            assert (x is None and y is None) or abs(x - y) < 1e-4, c
    for c in set(ta.column_names) - set(columns):
        assert ta.column(c).to_pylist() == tb.column(c).to_pylist(), c


def test_a_second_run_finds_every_answer_and_they_equal_computing_from_scratch(tmp_path, docs, tiny_model_dir):
    filt = ["filter", docs, "--text-column", "text", "--predicate", "Is it about a river?", "--predicate",
            "Is it about money?", "--keep-all"]
    cold = _run(tmp_path, tiny_model_dir, *filt, "--threshold", "0", "--output", tmp_path / "a.parquet")
    assert cold["tokens_reused"]["store"] == 0
    warm = _run(tmp_path, tiny_model_dir, *filt, "--threshold", "0", "--output", tmp_path / "b.parquet")
    assert warm["tokens_computed"] == 0 and warm["tokens_reused"]["store"] == warm["tokens_naive"] == cold["tokens_naive"]
    assert warm["predicted"]["tokens_reused"]["store"] == warm["tokens_reused"]["store"]  # counted before the run
    _run(tmp_path, tiny_model_dir, *filt, "--threshold", "0", "--no-reuse", "--output", tmp_path / "c.parquet")
    _close(tmp_path / "b.parquet", tmp_path / "c.parquet", ["p_yes_1", "p_yes_2"])
    # another threshold still finds them, and decides by itself
    moved = _run(tmp_path, tiny_model_dir, *filt, "--threshold", "0.5", "--output", tmp_path / "d.parquet")
    assert moved["tokens_computed"] == 0 and moved["predicted"]["tokens_computed"] == 0
    _run(tmp_path, tiny_model_dir, *filt, "--threshold", "0.5", "--no-reuse", "--output", tmp_path / "e.parquet")
    _close(tmp_path / "d.parquet", tmp_path / "e.parquet", ["p_yes_1", "p_yes_2"])
    # another predicate is asked anew; the first one's answers are still found
    other = _run(tmp_path, tiny_model_dir, "filter", docs, "--text-column", "text", "--predicate", "Is it about a river?",
                 "--predicate", "Is it about sport?", "--keep-all", "--threshold", "0",
                 "--output", tmp_path / "f.parquet")
    assert 0 < other["tokens_computed"] < other["tokens_naive"] and other["tokens_reused"]["store"] == 0
    # a classify: its labels are part of the question
    cls = ["classify", docs, "--text-column", "text", "--label", "nature", "--label", "money"]
    first = _run(tmp_path, tiny_model_dir, *cls, "--output", tmp_path / "g.parquet")
    again = _run(tmp_path, tiny_model_dir, *cls, "--output", tmp_path / "h.parquet")
    assert first["tokens_computed"] > 0 and again["tokens_computed"] == again["predicted"]["tokens_computed"] == 0
    _close(tmp_path / "g.parquet", tmp_path / "h.parquet", ["p_nature", "p_money"])
    relabelled = _run(tmp_path, tiny_model_dir, *cls, "--label", "sport", "--output", tmp_path / "i.parquet")
    assert relabelled["tokens_reused"]["store"] == 0


def test_switched_off_the_accounting_is_as_without_a_store(tmp_path, docs, tiny_model_dir):
    filt = ["filter", docs, "--text-column", "text", "--predicate", "Is it about a river?", "--output",
            tmp_path / "a.parquet"]
    first = _run(tmp_path, tiny_model_dir, *filt, "--no-answer-store")
    again = _run(tmp_path, tiny_model_dir, *filt, "--no-answer-store")
    accounting = ("tokens_naive", "tokens_computed", "tokens_reused")
    assert [first[k] for k in accounting] == [again[k] for k in accounting]
    assert first["tokens_reused"]["store"] == 0 and not (tmp_path / "answers.sqlite").exists()


def test_a_joins_pairs_are_stored_and_found_again(tmp_path, docs, tiny_model_dir):
    right = tmp_path / "right.parquet"
    pq.write_table(pa.table({"name": ["rivers", "money", "space travel"]}), right)
    join = ["join", docs, right, "--left-column", "text", "--right-column", "name", "--condition",
            "The document is about the topic.", "--threshold", "0"]
    first = _run(tmp_path, tiny_model_dir, *join, "--output", tmp_path / "a.parquet")
    again = _run(tmp_path, tiny_model_dir, *join, "--output", tmp_path / "b.parquet")
    assert first["tokens_computed"] > 0 and again["tokens_computed"] == again["predicted"]["tokens_computed"] == 0
    assert again["tokens_reused"]["store"] == again["tokens_naive"] == first["tokens_naive"]
    _close(tmp_path / "a.parquet", tmp_path / "b.parquet", ["p_yes"])


def test_a_truncated_joins_rerun_is_predicted_as_it_runs(tmp_path, docs, tiny_model_dir):
    """Right rows longer than their half of the context: the prediction keys them cut, as the run does."""
    left, right = tmp_path / "left.parquet", tmp_path / "right.parquet"
    pq.write_table(pa.table({"text": ["a river " * 4500, "short"]}), left)
    pq.write_table(pa.table({"name": ["rivers " * 6000, "money"]}), right)
    join = ["join", left, right, "--left-column", "text", "--right-column", "name", "--condition",
            "The document is about the topic.", "--threshold", "0", "--truncate"]
    first = _run(tmp_path, tiny_model_dir, *join, "--output", tmp_path / "a.parquet")
    again = _run(tmp_path, tiny_model_dir, *join, "--output", tmp_path / "b.parquet")
    assert first["rows_truncated"] == 2 and first["tokens_computed"] > 0
    assert again["tokens_computed"] == again["predicted"]["tokens_computed"] == 0
    assert again["predicted"]["tokens_reused"]["store"] == again["tokens_reused"]["store"] == first["tokens_naive"]
    _close(tmp_path / "a.parquet", tmp_path / "b.parquet", ["p_yes"])


def _write_forever(path: str, ready) -> None:
    store = SqliteStore(path)
    i = 0
    while True:
        store.put([(answer_key("m", "q", [i, j]), [j / 100]) for j in range(100)])
        if i == 5:
            ready.set()
        i += 1


@pytest.mark.services  # a spawned Python process
def test_a_writer_killed_mid_run_leaves_a_sound_store_with_what_it_committed(tmp_path):
    import os
    import signal

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_write_forever, args=(str(tmp_path / "a.sqlite"), ready))
    p.start()
    assert ready.wait(60)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    store = SqliteStore(tmp_path / "a.sqlite")
    assert store.stats()["writable"] and not list(tmp_path.glob("*.corrupt-*"))
    assert len(store.get([answer_key("m", "q", [i, j]) for i in range(6) for j in range(100)], 1)) == 600


def test_a_full_disk_only_warns_and_the_store_stops_writing(tmp_path, caplog):
    import shutil
    import subprocess

    disk = tmp_path / "small"
    disk.mkdir()
    mounted = shutil.which("mount") and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(disk)],
                                                        capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("cannot mount a small tmpfs here (needs root and a mount namespace)")
    try:
        store = SqliteStore(disk / "a.sqlite")
        with caplog.at_level(logging.WARNING):
            for lo in range(0, 20_000, 1000):
                store.put([(answer_key("m", "q", [i]), [0.5] * 8) for i in range(lo, lo + 1000)])
        assert not store.writable and "failed to write" in caplog.text
        assert store.get([answer_key("m", "q", [0])], 8)  # what went in before the disk filled is still read
        store.close()
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_the_bound_is_a_setting_checked_before_use(tmp_path, monkeypatch):
    from quail.errors import QuailError

    monkeypatch.setenv("QUAIL_ANSWER_STORE_MAX_BYTES", str(8 << 20))
    assert SqliteStore(tmp_path / "a.sqlite").max_bytes == 8 << 20
    for bad in ("lots", "1000", "²²²"):  # #48 17: a digit to str.isdigit, and a traceback
        monkeypatch.setenv("QUAIL_ANSWER_STORE_MAX_BYTES", bad)
        with pytest.raises(QuailError, match="QUAIL_ANSWER_STORE_MAX_BYTES"):
            SqliteStore(tmp_path / "b.sqlite")


def _planted(path, value: bytes) -> list[bytes]:
    """A store of 12 answers of 0.25, then every value replaced by `value`, signed with this
    process's key: what a worker with a bug, not an intruder, could have stored."""
    keys = [answer_key("m", "q", [i]) for i in range(12)]
    store = SqliteStore(path)
    store.put((k, [0.25]) for k in keys)
    store.close()
    db = sqlite3.connect(path)
    db.executemany("UPDATE answers SET value = ? WHERE key = ?", [(signer().seal(k, value), k) for k in keys])
    db.commit()
    db.close()
    return keys


@pytest.mark.parametrize("planted", ["value", "moved", "old"])
def test_a_value_not_signed_with_this_key_is_a_miss_counted_logged_and_stored_over(tmp_path, caplog, planted):
    """Whoever can write the store's table cannot plant an answer: not a value of their own, nor a
    signed value moved to another key, nor one signed with another key (a worker that has another)."""
    path = tmp_path / "a.sqlite"
    keys = _planted(path, array("d", [0.06]).tobytes())
    db = sqlite3.connect(path)
    if planted == "value":  # P(yes) 0.999 where the model says 0.06, as a hostile role would
        db.executemany("UPDATE answers SET value = ? WHERE key = ?",
                       [(array("d", [0.999]).tobytes() + bytes(16), k) for k in keys])
    elif planted == "moved":  # another key's signed 0.999
        db.executemany("UPDATE answers SET value = ? WHERE key = ?",
                       [(signer().seal(b"another key", array("d", [0.999]).tobytes()), k) for k in keys])
    else:
        other = Signer(b"the key of another worker of the pool")
        db.executemany("UPDATE answers SET value = ? WHERE key = ?",
                       [(other.seal(k, array("d", [0.999]).tobytes()), k) for k in keys])
    db.commit()
    db.close()
    store = SqliteStore(path)
    with caplog.at_level(logging.WARNING):
        assert store.get(keys, 1) == {}
    assert "12 value(s) not signed with this process's key" in caplog.text
    assert store.stats()["rejected_unsigned"] == 12 and store.stats()["key"] == signer().fingerprint
    store.put((k, [0.06]) for k in keys)
    assert SqliteStore(path).get(keys, 1) == {k: [0.06] for k in keys}


@pytest.mark.parametrize("where", ["store", "folder", "owner"])
def test_a_store_another_user_could_have_written_is_not_used(tmp_path, caplog, where):
    import os

    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "a.sqlite"
    keys = _planted(path, array("d", [0.999]).tobytes())
    if where == "store":
        path.chmod(0o666)
    elif where == "folder":
        folder.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, 65534, 65534)
    with caplog.at_level(logging.WARNING):
        store = SqliteStore(path)
        assert store.get(keys, 1) == {}
    assert "is not used" in caplog.text and ("another user" in caplog.text or "writable by other" in caplog.text)
    store.put([(keys[0], [0.5])])  # nor written
    assert not store.stats()["writable"]


def test_a_new_store_is_private_whatever_the_umask(tmp_path):
    import os

    old = os.umask(0o002)
    try:
        SqliteStore(tmp_path / "new" / "a.sqlite").put([(answer_key("m", "q", [0]), [0.5])])
    finally:
        os.umask(old)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "new" / "a.sqlite").stat().st_mode & 0o777 == 0o600
    assert SqliteStore(tmp_path / "new" / "a.sqlite").get([answer_key("m", "q", [0])], 1)  # trusted again


@pytest.mark.parametrize("value", [b"\x00\x00\xf8\x7f" * 2,  # NaN
                                   b"\x00" * 6 + b"\x00\x40",  # 2.0
                                   b"\x00\x00\xf0\xbf".rjust(8, b"\x00"),  # -1.0
                                   b"abc",  # not a whole float
                                   b"\x00" * 16,  # two values where one is asked
                                   None, "0.5"])  # not bytes
def test_a_stored_value_that_is_not_an_answer_is_a_miss_and_is_stored_over(tmp_path, caplog, value):
    path = tmp_path / "a.sqlite"
    keys = _planted(path, b"\x00" * 8)
    db = sqlite3.connect(path)
    db.execute("PRAGMA ignore_check_constraints = 1")
    stored = signer().seal(keys[0], value) if isinstance(value, bytes) else value if value is not None else b""
    db.execute("UPDATE answers SET value = ? WHERE key = ?", (stored, keys[0]))
    if value is None:
        db.execute("CREATE TABLE t AS SELECT * FROM answers")  # a NULL where NOT NULL is declared: a damaged row
        db.execute("DROP TABLE answers")
        db.execute("CREATE TABLE answers (key BLOB PRIMARY KEY, value BLOB, used INTEGER NOT NULL) WITHOUT ROWID")
        db.execute("INSERT INTO answers SELECT key, NULL, used FROM t WHERE key = ?", (keys[0],))
        db.execute("INSERT INTO answers SELECT * FROM t WHERE key != ?", (keys[0],))
    db.commit()
    db.close()
    store = SqliteStore(path)
    with caplog.at_level(logging.WARNING):
        found = store.get(keys, 1)
    assert keys[0] not in found and len(found) == 11
    assert ("not answers" if isinstance(value, bytes) else "not signed") in caplog.text
    store.put([(keys[0], [0.75])])
    assert SqliteStore(path).get(keys[:1], 1) == {keys[0]: [0.75]}


@pytest.mark.parametrize("used", ["abc", None, 1.5, b"\x01"])
def test_a_last_use_that_is_no_time_is_used_anew_not_a_traceback(tmp_path, used):
    path = tmp_path / "a.sqlite"
    keys = _planted(path, b"\x00" * 8)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t AS SELECT * FROM answers")  # a column without its NOT NULL: a damaged row
    db.execute("DROP TABLE answers")
    db.execute("CREATE TABLE answers (key BLOB PRIMARY KEY, value BLOB NOT NULL, used) WITHOUT ROWID")
    db.execute("INSERT INTO answers SELECT key, value, ? FROM t", (used,))
    db.commit()
    store = SqliteStore(path, touch_every=0)
    assert len(store.get(keys, 1)) == 12  # each one's value is whole: an answer, used now
    assert {r[0] for r in db.execute("SELECT typeof(used) FROM answers")} == {"integer"}
    db.close()


def test_a_log_not_yet_folded_in_forgets_no_answer(tmp_path):
    """The bound counts the database and its write-ahead log; a log that only needs folding in
    (checkpointing) must not make the store forget answers it has room for."""
    path = tmp_path / "a.sqlite"
    store = SqliteStore(path, max_bytes=1 << 30, touch_every=0)
    store.put([(answer_key("m", "q", [i]), [0.5] * 8) for i in range(30_000)])
    compact = tmp_path / "compact.sqlite"
    with sqlite3.connect(path) as src, sqlite3.connect(compact) as dst:
        src.backup(dst)
    bound = int(compact.stat().st_size * 1.5)
    assert store.size() > bound  # the log makes it look too large
    bounded = SqliteStore(path, max_bytes=bound, touch_every=0)
    bounded.put([(answer_key("m", "q", [10**6]), [0.5] * 8)])
    assert bounded.stats()["answers"] == 30_001 and bounded.size() <= bound


def test_a_refused_store_is_said_in_the_summary_and_the_stats(tmp_path, capsys, monkeypatch, smollm2_for_every_session):
    """#48 18: a store in a folder others may write was refused with one line on stderr, and the
    summary and the stats said nothing of it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    docs = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": ["a river", "a mountain"]}), docs)
    monkeypatch.setenv("QUAIL_ANSWER_STORE", str(shared / "x.sqlite"))
    with pytest.raises(SystemExit) as e:
        main(["filter", str(docs), "--text-column", "text", "--predicate", "Is it about a river?", "--keep-all",
              "--model", "smollm2-135m", "--dtype", "float32", "--output", str(tmp_path / "o.parquet"),
              "--stats", str(tmp_path / "s.json")])
    assert e.value.code == 0
    err = capsys.readouterr().err
    assert "not in use (is not used: folder" in err and "writable by other users" in err
    use = json.loads((tmp_path / "s.json").read_text())["answer_store"]
    assert use["in_use"] is False and "writable by other users" in use["why_not"]
