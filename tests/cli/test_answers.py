"""cli/answers.py: `quail answers stats|clear` on the answer store (here the test's own SQLite file,
$QUAIL_ANSWER_STORE of tests/conftest.py)."""

import os

import pytest

from quail.cli.main import main
from quail.store import answer_key
from tests.cli.test_bad_input import refused


def _answers(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(["answers", *map(str, argv)])
    out, err = capsys.readouterr()
    assert e.value.code == 0, err
    return out


def test_stats_and_clear(capsys):
    from quail.store import open_store

    path = os.environ["QUAIL_ANSWER_STORE"]
    open_store().put([(answer_key("m", "q", [i]), [0.5] * 8) for i in range(3)])
    assert _answers(capsys, "stats").startswith(f"{path}: 3 answers, ")
    assert _answers(capsys, "clear") == f"removed 3 answers from {path}\n"
    assert _answers(capsys, "stats").startswith(f"{path}: 0 answers, ")


def test_answer_store_names_another_store(capsys, tmp_path):
    other = tmp_path / "other.sqlite"
    assert _answers(capsys, "stats", "--answer-store", other).startswith(f"{other}: 0 answers, ")
    assert _answers(capsys, "clear", "--answer-store", other) == f"removed 0 answers from {other}\n"


def test_a_store_that_cannot_be_written_is_not_cleared(capsys, monkeypatch):
    from quail.store.sqlite import SqliteStore

    stats = SqliteStore.stats
    monkeypatch.setattr(SqliteStore, "stats", lambda self: {**stats(self), "writable": False})
    monkeypatch.setattr(SqliteStore, "clear", lambda self: pytest.fail("cleared"))
    assert _answers(capsys, "stats").rstrip().endswith(" (read-only)")
    refused(capsys, "answers", "clear", says="cannot be written (read-only, unreachable or of a newer schema): "
                                             "nothing was removed")


def test_what_names_no_store_is_refused(capsys, tmp_path):
    refused(capsys, "answers", "stats", "--answer-store", "garbage", says="answer store: give a path with a folder")
    refused(capsys, "answers", "clear", "--answer-store", tmp_path / "a.sqlite", "--answer-store-file", "f",
            says="--answer-store-file not allowed with argument --answer-store")
    refused(capsys, "answers", says="the following arguments are required: action")
    refused(capsys, "answers", "vacuum", says="action invalid choice: 'vacuum' (choose from 'stats', 'clear')")
