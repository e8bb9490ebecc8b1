"""Operator I/O through Airflow connections and SQLAlchemy: SQLite always, PostgreSQL where its
server binaries are installed (CI installs them)."""

import errno
import json
import os
import re
import stat

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_quail.io import read_source, write_target
from quail.errors import QuailError
from tests.postgres import throwaway_cluster

TABLE = pa.table({"id": [1, 2, 3], "text": ["a goal", None, "rates rose"], "score": [0.5, 1.5, None],
                  "ok": [True, False, True]})


@pytest.fixture
def sqlite_conn(tmp_path, monkeypatch):
    db = tmp_path / "news.db"
    monkeypatch.setenv("AIRFLOW_CONN_NEWS_DB", json.dumps({"conn_type": "sqlite", "host": str(db)}))
    return "news_db"


@pytest.fixture(scope="module")
def postgres():
    with throwaway_cluster() as cluster:
        yield cluster.port


@pytest.fixture
def postgres_conn(postgres, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps({"conn_type": "postgres", "host": "127.0.0.1",
                                                             "port": postgres, "login": "postgres",
                                                             "schema": "postgres"}))
    return "warehouse"


@pytest.mark.parametrize("conn", ["sqlite_conn", pytest.param("postgres_conn", marks=pytest.mark.services)])
def test_tables_round_trip_and_replace_atomically(conn, request):
    conn_id = request.getfixturevalue(conn)
    target = f"sql://{conn_id}/scored"
    write_target(TABLE, target)
    back = read_source(target)
    assert back.to_pylist() == TABLE.to_pylist()
    write_target(TABLE.slice(0, 1), target)  # a second write replaces the table
    assert read_source(target).num_rows == 1
    assert read_source(f"sql://{conn_id}?query=SELECT text FROM scored WHERE id = 1").to_pylist() == [{"text": "a goal"}]
    from airflow.sdk import BaseHook

    engine = BaseHook.get_connection(conn_id).get_hook().get_sqlalchemy_engine()
    assert [t for t in sa.inspect(engine).get_table_names() if "quail" in t] == []  # no staging table left


def test_a_failed_write_leaves_the_old_table(sqlite_conn):
    target = f"sql://{sqlite_conn}/scored"
    write_target(TABLE, target)
    with pytest.raises(QuailError, match="cannot be written to SQL"):
        write_target(pa.table({"when": pa.array([b"x"], pa.binary())}), target)
    assert read_source(target).num_rows == 3


def test_bad_sources_name_the_problem(sqlite_conn):
    write_target(TABLE, f"sql://{sqlite_conn}/scored")
    with pytest.raises(QuailError, match="has no table 'nope'"):
        read_source(f"sql://{sqlite_conn}/nope")
    with pytest.raises(QuailError, match="OperationalError"):
        read_source(f"sql://{sqlite_conn}?query=SELECT nothing FROM scored")
    with pytest.raises(QuailError, match="give a .parquet or .csv path"):
        read_source("data.json")
    with pytest.raises(QuailError, match="sql://CONN_ID/TABLE"):
        read_source("sql://only_a_conn")


@pytest.fixture
def memory_store():
    """An fsspec in-memory filesystem attached to Airflow's object storage as memory://."""
    import fsspec
    from airflow.sdk.io import attach

    fs = fsspec.filesystem("memory")
    attach("memory", fs=fs)
    yield fs
    fs.store.clear()


def test_object_storage_paths_round_trip_and_replace_whole(memory_store, tmp_path):
    target = "memory://lake/scored/out.parquet"
    write_target(TABLE, target)
    assert read_source(target).to_pylist() == TABLE.to_pylist()
    write_target(TABLE.slice(0, 1), target)
    assert read_source(target).num_rows == 1
    assert [p for p in memory_store.store if "quail" in p] == []  # no temporary object left
    local = f"file://{tmp_path}/x.parquet"  # the local filesystem through the same path
    write_target(TABLE, local)
    assert read_source(local).num_rows == 3 and (tmp_path / "x.parquet").is_file()
    memory_store.pipe("/lake/in.csv", b"id,text\n1,a goal\n")
    assert read_source("memory://lake/in.csv").to_pylist() == [{"id": 1, "text": "a goal"}]


def test_bad_object_paths_name_the_problem(memory_store):
    with pytest.raises(QuailError, match="no such object"):
        read_source("memory://lake/absent.parquet")
    with pytest.raises(QuailError, match="provider for nosuch://"):
        read_source("nosuch://bucket/x.parquet")
    with pytest.raises(QuailError, match="outputs are .parquet"):
        write_target(TABLE, "memory://lake/out.csv")
    memory_store.pipe("/lake/bad.parquet", b"not parquet")
    with pytest.raises(QuailError, match="not a readable Parquet file"):
        read_source("memory://lake/bad.parquet")


def _engine(conn_id: str) -> sa.Engine:
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).get_hook().get_sqlalchemy_engine()


def _staging_left(conn_id: str) -> list[str]:
    return [t for t in sa.inspect(_engine(conn_id)).get_table_names() if "__quail_" in t]


@pytest.mark.parametrize("conn", ["sqlite_conn", pytest.param("postgres_conn", marks=pytest.mark.services)])
def test_a_swap_that_fails_leaves_the_old_table_and_no_staging_even_with_no_rows(conn, request):
    """SQLite ran CREATE, DROP and RENAME outside any transaction when the output had no rows: a
    view on the target made the RENAME fail after the DROP had committed, and the table was gone."""
    conn_id = request.getfixturevalue(conn)
    target = f"sql://{conn_id}/scored"
    write_target(TABLE, target)
    with _engine(conn_id).begin() as c:
        c.execute(sa.text("CREATE VIEW good AS SELECT id FROM scored WHERE ok"))
    with pytest.raises(QuailError, match="the table was left as it was: .*view"):
        write_target(TABLE.slice(0, 0), target)
    assert read_source(target).num_rows == 3 and _staging_left(conn_id) == []
    with _engine(conn_id).begin() as c:
        c.execute(sa.text("DROP VIEW good"))


def test_an_unsigned_value_beyond_bigint_is_refused_by_column_and_nothing_is_left(sqlite_conn):
    target = f"sql://{sqlite_conn}/scored"
    write_target(TABLE, target)
    with pytest.raises(QuailError, match="column 'n' holds 18446744073709551615"):
        write_target(pa.table({"n": pa.array([1, 2**64 - 1], pa.uint64())}), target)
    assert read_source(target).num_rows == 3 and _staging_left(sqlite_conn) == []


@pytest.mark.parametrize("conn", ["sqlite_conn", pytest.param("postgres_conn", marks=pytest.mark.services)])
def test_a_source_query_runs_read_only(conn, request):
    conn_id = request.getfixturevalue(conn)
    write_target(TABLE, f"sql://{conn_id}/scored")
    with pytest.raises(QuailError, match="source"):
        read_source(f"sql://{conn_id}?query=DROP TABLE scored")
    assert read_source(f"sql://{conn_id}/scored").num_rows == 3
    assert read_source(f"sql://{conn_id}?query=SELECT id FROM scored").num_rows == 3  # the pool's connection is fine


def test_bad_targets_are_refused_before_any_work(sqlite_conn, tmp_path):
    from airflow_quail.io import check_target

    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    cases = {str(a_file / "out.parquet"): "is a file, not a folder",
             "/proc/x.parquet": "cannot write in /proc",
             "sql://no_such_conn/t": "the connection 'no_such_conn' is not defined",
             str(tmp_path): "outputs are .parquet",
             str(tmp_path / "in.parquet"): "is one of the inputs",
             f"file://{tmp_path}/in.parquet": "is one of the inputs",
             "file:///proc/x.parquet": "cannot write in /proc",
             f"file://{a_file}/out.parquet": "is a file, not a folder"}
    if os.geteuid() != 0:  # root writes anywhere
        cases[str(read_only / "x.parquet")] = "cannot write in"
    for target, says in cases.items():
        with pytest.raises(QuailError, match=says):
            check_target(target, [str(tmp_path / "in.parquet")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["news.db", "plain.txt", "ro"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "ro"]  # no probe left behind


def test_a_target_that_is_the_source_however_spelt_is_refused(tmp_path):
    """A file:// URI, a relative path, a symbolic or a hard link to the source: each would overwrite
    the input while it is read."""
    from airflow_quail.io import check_target

    source = tmp_path / "in.parquet"
    source.write_bytes(b"PAR1")
    (tmp_path / "link.parquet").symlink_to(source)
    os.link(source, tmp_path / "hard.parquet")
    for target in (f"file://{source}", f"file://{tmp_path}/sub/../in.parquet", str(tmp_path / "link.parquet"),
                   str(tmp_path / "hard.parquet"), f"file://{tmp_path}/hard.parquet"):
        for sources in ([str(source)], [f"file://{source}"]):
            with pytest.raises(QuailError, match="is one of the inputs"):
                check_target(target, sources)
    assert source.read_bytes() == b"PAR1"


@pytest.mark.parametrize("uri", [False, True], ids=["path", "file-uri"])
def test_a_local_target_keeps_the_mode_of_the_file_it_replaces(tmp_path, uri):
    path = tmp_path / "out.parquet"
    target = f"file://{path}" if uri else str(path)
    old = os.umask(0o022)
    try:
        write_target(TABLE, target)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        path.chmod(0o664)
        write_target(TABLE.slice(0, 1), target)
        assert stat.S_IMODE(path.stat().st_mode) == 0o664 and pq.read_table(path).num_rows == 1
    finally:
        os.umask(old)


@pytest.mark.parametrize("uri", [False, True], ids=["path", "file-uri"])
def test_a_full_disk_under_a_local_target_is_a_quail_error(tmp_path, monkeypatch, uri):
    path = tmp_path / "out.parquet"
    write_target(TABLE, str(path))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    with pytest.raises(QuailError, match=re.escape(f"cannot write {path}: No space left on device")):
        write_target(TABLE.slice(0, 1), f"file://{path}" if uri else str(path))
    monkeypatch.undo()
    assert pq.read_table(path).num_rows == 3 and [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_a_source_with_two_columns_of_one_name_is_refused_by_name(sqlite_conn, tmp_path):
    path = tmp_path / "dup.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["a goal"]), pa.array(["x"])], names=["text", "text"]), path)
    (tmp_path / "dup.csv").write_text("id,text,id\n1,a goal,2\n")
    for source, column in ((str(path), "text"), (f"file://{path}", "text"), (str(tmp_path / "dup.csv"), "id")):
        with pytest.raises(QuailError, match=re.escape(f"{source}: more than one column is named {column!r}")):
            read_source(source)
    write_target(TABLE, f"sql://{sqlite_conn}/scored")
    query = f"sql://{sqlite_conn}?query=SELECT text, id AS text FROM scored"
    with pytest.raises(QuailError, match=re.escape(f"source {query!r}: more than one column is named 'text'")):
        read_source(query)


def _spelt(draw_case, name: str) -> str:
    return "".join(c.upper() if up else c for c, up in zip(name, draw_case))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_sql_target_that_reads_its_source_however_spelt_is_refused(sqlite_conn, tmp_path, monkeypatch, data):
    """#33 item 8: the table's name in another case, a query over it, or a second connection to the
    same database file: each would drop the input table."""
    from airflow_quail.io import check_target

    db = tmp_path / "news.db"
    if not db.exists():
        write_target(TABLE, f"sql://{sqlite_conn}/jokes")
        (tmp_path / "link.db").symlink_to(db)
    monkeypatch.setenv("AIRFLOW_CONN_SAME_DB", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "link.db")}))
    monkeypatch.setenv("AIRFLOW_CONN_OTHER_DB", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "o.db")}))
    case = data.draw(st.lists(st.booleans(), min_size=5, max_size=5))
    table = _spelt(data.draw(st.lists(st.booleans(), min_size=5, max_size=5)), "jokes")
    source = data.draw(st.sampled_from([f"sql://{sqlite_conn}/{table}", f"sql://same_db/{table}",
                                        f"sql://{sqlite_conn}?query=SELECT text FROM {table} WHERE id > 1",
                                        f"sql://same_db?query=select * from\n{table}"]))
    target = data.draw(st.sampled_from([sqlite_conn, "same_db"]))
    with pytest.raises(QuailError, match="is one of the inputs"):
        check_target(f"sql://{target}/{_spelt(case, 'jokes')}", [source])
    check_target(f"sql://{target}/jokes_out", [source])  # another table of the same database
    check_target(f"sql://other_db/{_spelt(case, 'jokes')}", [source])  # the same name in another database
    assert read_source(f"sql://{sqlite_conn}/jokes").num_rows == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source_form=st.integers(0, 5), target_form=st.integers(0, 5))
def test_a_local_target_that_is_its_source_however_spelt_is_refused(tmp_path, monkeypatch, source_form, target_form):
    """#33 item 9: `local://`, `file:/` (one slash), `file://`, a relative path, links."""
    from airflow_quail.io import check_target, local_file

    source = tmp_path / "in.parquet"
    if not source.exists():
        pq.write_table(TABLE, source)
        (tmp_path / "link.parquet").symlink_to(source)
        os.link(source, tmp_path / "hard.parquet")
    monkeypatch.chdir(tmp_path)

    def spelt(form: int, path) -> str:
        return [str(path), f"file://{path}", f"file:{path}", f"local://{path}", "./in.parquet",
                str(tmp_path / "link.parquet")][form]

    with pytest.raises(QuailError, match="is one of the inputs"):
        check_target(spelt(target_form, source), [spelt(source_form, source)])
    assert local_file(spelt(target_form, source)).resolve() == source
    assert pq.read_table(source) == TABLE and not list(tmp_path.glob("file:*"))


@pytest.mark.parametrize("target", ["file://io/in.parquet", "local://somehost/x.parquet", "FILE://io/in.parquet"])
def test_a_file_uri_naming_another_host_is_refused(tmp_path, monkeypatch, target):
    """#48 13: `file://io/in.parquet` (a folder meant) wrote /in.parquet at the filesystem's root."""
    from airflow_quail.io import check_target, local_file

    monkeypatch.chdir(tmp_path)
    with pytest.raises(QuailError, match="names the host .*a plain path"):
        check_target(target)
    assert not list(tmp_path.iterdir())
    assert str(local_file("file://localhost/tmp/x.parquet")) == "/tmp/x.parquet"


def test_a_file_uri_with_one_slash_is_written_where_it_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    write_target(TABLE, f"file:{tmp_path}/out/x.parquet")
    write_target(TABLE, f"local://{tmp_path}/out/y.parquet")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x.parquet", "y.parquet"]
    assert read_source(f"file:{tmp_path}/out/x.parquet") == TABLE and not list(tmp_path.glob("file:*"))


def test_a_locked_sqlite_source_is_named_not_a_traceback(sqlite_conn, tmp_path):
    import sqlite3

    write_target(TABLE, f"sql://{sqlite_conn}/scored")
    holder = sqlite3.connect(tmp_path / "news.db", isolation_level=None, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing it, for longer than the reader waits
    try:
        with pytest.raises(QuailError, match=r"source 'sql://news_db/scored': OperationalError.*locked"):
            read_source(f"sql://{sqlite_conn}/scored")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.services  # a throwaway PostgreSQL cluster
def test_a_target_its_connection_may_not_write_is_refused_before_any_work(postgres, postgres_conn, monkeypatch):
    """A user who may read the database but not create tables in it: refused by check_target, where
    it was refused only by the write after all the computing; the probe table is never left."""
    from airflow_quail.io import check_target

    write_target(TABLE, f"sql://{postgres_conn}/scored")
    with _engine(postgres_conn).begin() as c:
        c.exec_driver_sql("DROP ROLE IF EXISTS reader")
        c.exec_driver_sql("CREATE ROLE reader LOGIN")
        c.exec_driver_sql("GRANT SELECT ON scored TO reader")
    monkeypatch.setenv("AIRFLOW_CONN_READER", json.dumps({"conn_type": "postgres", "host": "127.0.0.1",
                                                          "port": postgres, "login": "reader", "schema": "postgres"}))
    assert read_source("sql://reader/scored").num_rows == 3
    with pytest.raises(QuailError, match=r"target 'sql://reader/out' cannot be written: .*permission denied"):
        check_target("sql://reader/out", ["sql://reader/scored"])
    check_target(f"sql://{postgres_conn}/out", [f"sql://{postgres_conn}/scored"])  # the owner may
    with _engine(postgres_conn).connect() as c:
        assert not [t for t in sa.inspect(c).get_table_names() if "quail_probe" in t]
