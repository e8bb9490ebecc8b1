"""Tables stream a window of rows at a time: a streamed run equals an unstreamed one row for row,
an error mid-stream names the row of the whole table and leaves the old output whole."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.pipeline.stream import TableSource

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
