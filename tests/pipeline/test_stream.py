"""Tables stream a window of rows at a time: a streamed run equals an unstreamed one row for row,
an error mid-stream names the row of the whole table and leaves the old output whole."""

import errno
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.errors import QuailError
from quail.pipeline.stream import OutputSink, TableSource

EXAMPLES = Path(__file__).parents[2] / "examples"

pytestmark = pytest.mark.usefixtures("smollm2_for_every_session")


def _cli(*argv) -> int:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv] + ["--dtype", "float32"])
    return e.value.code


def _close(a: pa.Table, b: pa.Table) -> None:
    assert a.schema == b.schema and a.num_rows == b.num_rows
    for name in a.column_names:
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        if pa.types.is_floating(a.schema.field(name).type):
            assert all((p is None and q is None) or abs(p - q) < 1e-4 for p, q in zip(x, y)), name
        else:
            assert x == y, name


def _both(tmp_path, *argv) -> tuple[pa.Table, pa.Table, dict]:
    """The command in one window and in windows of 3 rows; the outputs, and the streamed stats."""
    one, three, stats = tmp_path / "one.parquet", tmp_path / "three.parquet", tmp_path / "three.json"
    assert _cli(*argv, "--output", one) == 0
    assert _cli(*argv, "--output", three, "--window-rows", 3, "--stats", stats) == 0
    return pq.read_table(one), pq.read_table(three), json.loads(stats.read_text())


@pytest.mark.parametrize("extra", [["--keep-all"], ["--limit", 5], ["--keep-all", "--limit", 5]])
def test_a_streamed_filter_equals_one_window(tmp_path, extra):
    one, three, stats = _both(tmp_path, "filter", EXAMPLES / "news.csv", "--text-column", "text", "--threshold", "0.1",
                              "--predicate", "Is this article about sport?", "--predicate", "Is it about a match?",
                              *extra)
    _close(one, three)
    assert stats["tokens_computed"] + sum(stats["tokens_reused"].values()) == stats["tokens_naive"]


def test_a_streamed_classify_and_join_equal_one_window(tmp_path):
    one, three, _ = _both(tmp_path, "classify", EXAMPLES / "news.csv", "--text-column", "text",
                          "--label", "sport", "--label", "politics", "--label", "technology")
    _close(one, three)
    one, three, _ = _both(tmp_path, "join", EXAMPLES / "news.csv", EXAMPLES / "sports.csv", "--left-column", "text",
                          "--right-column", "sport", "--condition", "The article is about this sport.",
                          "--threshold", "0")
    _close(one, three)


def test_a_null_in_a_later_window_names_its_row_and_leaves_the_old_output(tmp_path, capsys):
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    texts = [f"Match report {i}: the home side won." for i in range(11)]
    pq.write_table(pa.table({"text": texts[:9] + [None] + texts[9:]}), src, row_group_size=4)
    pq.write_table(pa.table({"old": [1]}), out)
    assert _cli("filter", src, "--text-column", "text", "--predicate", "Sport?", "--output", out,
                "--window-rows", 4) == 2
    err = capsys.readouterr().err
    assert "quail: error:" in err and "row 9 of column 'text' is NULL" in err
    assert pq.read_table(out).column_names == ["old"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_windows_cover_the_table_in_order_and_never_exceed_their_size(tmp_path, suffix):
    path = tmp_path / f"t.{suffix}"
    table = pa.table({"id": list(range(1000)), "text": [f"row {i}" for i in range(1000)]})
    if suffix == "csv":
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path, row_group_size=37)
    windows = list(TableSource(str(path)).windows(64))
    assert [first for first, _ in windows] == list(range(0, 1000, 64))
    assert all(w.num_rows <= 64 for _, w in windows)
    assert pa.concat_tables(w for _, w in windows).column("id").to_pylist() == list(range(1000))


def _write(path: Path, table: pa.Table) -> None:
    with OutputSink(str(path)) as sink:
        sink.write(table)


def test_an_output_keeps_the_mode_of_the_file_it_replaces_and_a_new_one_gets_the_umasks(tmp_path):
    old = os.umask(0o022)
    try:
        _write(tmp_path / "new.parquet", pa.table({"a": [1]}))
        assert stat.S_IMODE((tmp_path / "new.parquet").stat().st_mode) == 0o644
        for mode in (0o644, 0o664, 0o600):
            (tmp_path / "new.parquet").chmod(mode)
            _write(tmp_path / "new.parquet", pa.table({"a": [2]}))
            assert stat.S_IMODE((tmp_path / "new.parquet").stat().st_mode) == mode
    finally:
        os.umask(old)


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")


@pytest.mark.parametrize("when", ["write_table", "close"])
def test_a_full_disk_is_named_and_leaves_the_old_output_and_no_temporary(tmp_path, monkeypatch, when):
    out = tmp_path / "out.parquet"
    _write(out, pa.table({"old": [1]}))
    close = pq.ParquetWriter.close
    monkeypatch.setattr(pq.ParquetWriter, when, _full if when == "write_table" else lambda w: (close(w), _full()))
    with pytest.raises(QuailError, match=re.escape(f"cannot write {out}: No space left on device")):
        _write(out, pa.table({"new": [2]}))
    monkeypatch.undo()
    assert pq.read_table(out).column_names == ["old"] and [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_a_full_disk_on_the_cli_output_is_a_quail_error(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "data"  # apart from the answer store
    src, out = folder / "in.parquet", folder / "out.parquet"
    _write(out, pa.table({"old": [1]}))
    pq.write_table(pa.table({"text": ["The match ended two nil."]}), src)
    monkeypatch.setattr(pq.ParquetWriter, "write_table", _full)
    assert _cli("filter", src, "--text-column", "text", "--predicate", "Sport?", "--output", out) == 2
    assert f"quail: error: cannot write {out}: No space left on device" in capsys.readouterr().err
    monkeypatch.undo()
    assert pq.read_table(out).column_names == ["old"]
    assert sorted(p.name for p in folder.iterdir()) == ["in.parquet", "out.parquet"]


FILL_A_SMALL_TMPFS = """
import os, sys
import pyarrow as pa, pyarrow.parquet as pq
from quail.errors import QuailError
from quail.pipeline.stream import OutputSink
out = os.path.join(sys.argv[1], "out.parquet")
with OutputSink(out) as sink:
    sink.write(pa.table({"a": ["old"]}))
try:
    with OutputSink(out) as sink:
        for _ in range(8):  # 8 MB that do not compress, on a 1 MB tmpfs
            sink.write(pa.table({"a": [os.urandom(1 << 19).hex()]}))
except QuailError as e:
    print(e)
print(sorted(os.listdir(sys.argv[1])), pq.read_table(out).column("a").to_pylist())
"""


def test_a_real_full_tmpfs(tmp_path):
    """A 1 MB tmpfs mounted in a user namespace of its own, where this machine lets one be made."""
    mount = ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=1m quail-test "$1" && shift && exec "$@"', "sh",
             str(tmp_path)]
    try:
        probe = subprocess.run([*mount, "true"], capture_output=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no unshare(1) here: a tmpfs cannot be mounted without privileges")
    if probe.returncode != 0:
        pytest.skip(f"this machine lets no unprivileged user mount a tmpfs: {probe.stderr.decode().strip()}")
    done = subprocess.run([*mount, sys.executable, "-c", FILL_A_SMALL_TMPFS, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"cannot write {tmp_path}/out.parquet: No space left on device",
                                        "['out.parquet'] ['old']"]
