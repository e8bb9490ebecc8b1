"""cli/band.py: `quail band`'s parser and what it refuses before the model loads. Choosing a band
end to end, with a cascade that takes it: tests/runtime/test_cascade.py."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.band import labels
from quail.cli.main import main, parser
from quail.errors import QuailError
from tests.cli.test_bad_input import refused


def test_the_help_names_every_metric_it_takes(capsys):
    assert "target accuracy, precision or recall" in " ".join(parser().format_help().split())
    with pytest.raises(SystemExit) as e:
        main(["band", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0 and "a target accuracy, precision or recall" in out
    assert "--metric {accuracy,precision,recall}" in out


@pytest.mark.parametrize("argv, says", [
    ([], "--predicate: give at least one non-empty predicate"),
    (["--predicate", " "], "--predicate: give at least one non-empty predicate"),
    (["--predicate", "Sport?", "--target", "1"], "--target 1.0 is outside (0, 1)"),
    (["--predicate", "Sport?", "--delta", "0"], "--delta 0.0 is outside (0, 1)"),
])
def test_settings_that_cannot_work_are_refused_before_the_model_loads(capsys, monkeypatch, tmp_path, argv, says):
    monkeypatch.setattr("quail.session.Session.open", lambda *a, **k: pytest.fail("the model loaded"))
    pq.write_table(pa.table({"text": ["a"], "sport": [True]}), tmp_path / "s.parquet")
    refused(capsys, "band", tmp_path / "s.parquet", "--text-column", "text", "--label-column", "sport",
            "--target", "0.9", *argv, says=says)


def test_labels_are_booleans_or_their_words():
    table = pa.table({"b": [True, False], "w": ["Yes", " no "], "n": [1, 0], "bad": ["maybe", "yes"]})
    assert labels(table, "b", "s") == labels(table, "w", "s") == labels(table, "n", "s") == [True, False]
    with pytest.raises(QuailError, match="s: row 0 of label column 'bad' is 'maybe', not true/false"):
        labels(table, "bad", "s")
    with pytest.raises(QuailError, match="s: no label column 'x'; it has b, w, n, bad"):
        labels(table, "x", "s")
