"""Top-k joins: each left row's K best right rows, ranked, ties to the earlier right row; and the
clear errors for a bad K or a K on a kind that has no partners."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.kinds.join import ranked

MODEL = ["--model", "smollm2-135m", "--dtype", "float32"]


def test_ranked_keeps_the_best_k_above_the_floor_ties_in_right_row_order():
    p = [0.2, 0.9, 0.5, 0.9, 0.1]
    assert ranked(p, 0.0, 2) == [(1, 0.9), (3, 0.9)]
    assert ranked(p, 0.0, 3) == [(1, 0.9), (3, 0.9), (2, 0.5)]
    assert ranked(p, 0.3, 10) == [(1, 0.9), (3, 0.9), (2, 0.5)]  # the threshold is a floor
    assert ranked(p, 0.0, None) == [(1, 0.9), (3, 0.9), (2, 0.5), (0, 0.2), (4, 0.1)]
    assert ranked(p, 0.95, 1) == []


@pytest.mark.usefixtures("smollm2_for_every_session")
def test_a_top_k_join_gives_k_ranked_rows_per_left_row(tmp_path):
    pq.write_table(pa.table({"body": ["The striker scored twice in the derby.", "Rates rose again.",
                                      "A new phone chip was shown."]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"title": ["Derby goals", "Bank rates", "Chip news", "Weather"]}), tmp_path / "h.parquet")
    out = tmp_path / "o.parquet"
    with pytest.raises(SystemExit) as e:
        main(["join", str(tmp_path / "a.parquet"), str(tmp_path / "h.parquet"), "--left-column", "body",
              "--right-column", "title", "--condition", "The headline is the title of this article.",
              "--threshold", "0", "--top-k", "2", "--output", str(out), *MODEL])
    assert e.value.code == 0
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 3 * 2
    for left in range(3):
        mine = rows[2 * left: 2 * left + 2]
        assert len({r["left_body"] for r in mine}) == 1 and [r["rank"] for r in mine] == [1, 2]
        assert mine[0]["p_yes"] >= mine[1]["p_yes"]


@pytest.mark.usefixtures("smollm2_for_every_session")
@pytest.mark.parametrize("argv, says", [
    (["join", "a.parquet", "a.parquet", "--left-column", "t", "--right-column", "t", "--condition", "c",
      "--top-k", "0"], "top_k must be at least 1, got 0"),
    (["join", "a.parquet", "a.parquet", "--left-column", "t", "--right-column", "t", "--condition", "c",
      "--top-k", "-2"], "top_k must be at least 1, got -2"),
    (["filter", "a.parquet", "--text-column", "t", "--predicate", "p", "--top-k", "2"],
     "unrecognized arguments: --top-k 2"),
])
def test_a_bad_top_k_is_a_clear_error(tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"t": ["x"]}), tmp_path / "a.parquet")
    with pytest.raises(SystemExit) as e:
        main(argv + ["--output", "o.parquet", *MODEL])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err
    assert not (tmp_path / "o.parquet").exists()
