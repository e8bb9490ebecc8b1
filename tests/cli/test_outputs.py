"""Hardening item 3: an output may not be any file the run reads, whatever its kind: the tables, each
file of the model (an embedded one's inside its package too), the file that names the answer store,
the store's database and journals, Quail's observed records, the pipeline file, or another output.
Every case is refused before the model loads, exit 2, and leaves the file as it was. No model runs:
Session.open raises, so a run the check lets through fails the test before writing anything."""

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from quail.cli.main import main
from quail.model.registry import embedded_path, installed

EMBEDDED_MODEL = "smollm2-135m"


class _WouldCompute(Exception):
    """The check let the run reach the model."""


@pytest.fixture(autouse=True)
def _no_model(monkeypatch):
    def would_compute(*args, **kwargs):
        raise _WouldCompute()

    monkeypatch.setattr("quail.session.Session.open", would_compute)


@pytest.fixture
def news(tmp_path) -> Path:
    path = tmp_path / "news.parquet"
    pq.write_table(pa.table({"text": ["The striker scored.", "Rates rose."]}), path)
    return path


@pytest.fixture
def model_file(tmp_path) -> Path:
    path = tmp_path / "weights.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    return path


def refused(capsys, *argv, says: str) -> None:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "quail: error:" in err and says in err, err


def _filter(source, out, model, *extra):
    return ["filter", source, "--text-column", "text", "--predicate", "Is this about sport?", "--output", out,
            "--model", model, *extra]


def _seal(path: Path) -> tuple[int, int, str]:
    """What must not change: size, mtime and the first 4 MB's digest."""
    st = path.stat()
    with open(path, "rb") as f:
        return st.st_size, st.st_mtime_ns, hashlib.sha256(f.read(4 << 20)).hexdigest()


def _links(tmp_path: Path, target: Path) -> list[Path]:
    """The target, a symbolic link to it, and a hard link where one can be made (not across devices)."""
    tmp_path.joinpath("links").mkdir(exist_ok=True)
    soft = tmp_path / "links" / f"soft-{target.name}"
    soft.symlink_to(target)
    hard = tmp_path / "links" / f"hard-{target.name}"
    try:
        os.link(target, hard)
    except OSError:
        return [target, soft]
    return [target, soft, hard]


def test_stats_is_refused_on_a_model_file_given_by_path_through_a_link(news, model_file, tmp_path, capsys):
    for stats in _links(tmp_path, model_file):
        refused(capsys, *_filter(news, tmp_path / "o.parquet", model_file, "--stats", stats),
                says=f"--stats {stats} is a file of the model {model_file}, which the run never writes")
    assert model_file.read_bytes() == b"GGUF" + bytes(60) and not (tmp_path / "o.parquet").exists()


@pytest.mark.skipif(not installed(EMBEDDED_MODEL), reason=f"{EMBEDDED_MODEL} is not installed")
@pytest.mark.parametrize("command", ["filter", "classify", "join", "extract", "map", "pipeline"])
def test_stats_is_refused_on_the_file_an_embedded_name_resolves_to(news, tmp_path, capsys, command):
    """The 98 MB GGUF inside site-packages, which `--model smollm2-135m` reads, once became 1,037
    bytes of JSON; refused now by every command, however the path is spelt."""
    gguf = embedded_path(EMBEDDED_MODEL)
    before = _seal(gguf)
    soft = tmp_path / "model-link.gguf"
    soft.symlink_to(gguf)
    for stats in (gguf, soft):
        argv = _command(command, news, tmp_path, stats)
        refused(capsys, *argv, says=f"{stats} is a file of the model {EMBEDDED_MODEL}, which the run never writes")
    assert _seal(gguf) == before and not (tmp_path / "o.parquet").exists()


def _command(command: str, news: Path, tmp_path: Path, stats: Path) -> list:
    out = tmp_path / "o.parquet"
    if command == "pipeline":
        pipeline = tmp_path / "p.yaml"
        pipeline.write_text(yaml.safe_dump({"model": EMBEDDED_MODEL, "tables": {"news": str(news)}, "operators": [
            {"name": "f", "filter": {"input": "news", "column": "text", "predicates": ["Sport?"]},
             "output": str(out), "stats": str(stats)}]}))
        return ["pipeline", pipeline]
    given = {"filter": ["--predicate", "Sport?"], "classify": ["--label", "sport", "--label", "money"],
             "extract": ["--field", "team:str"], "map": ["--instruction", "Summarise it."],
             "join": [news, "--left-column", "text", "--right-column", "text", "--condition", "Same topic"]}[command]
    text = ["--text-column", "text"] if command != "join" else []
    return [command, news, *text, *given, "--output", out, "--stats", stats, "--model", EMBEDDED_MODEL]


@pytest.mark.parametrize("by_env", [False, True])
def test_stats_is_refused_on_the_file_that_names_the_answer_store(news, model_file, tmp_path, capsys, monkeypatch,
                                                                   by_env):
    secret = tmp_path / "store-url"
    secret.write_text(str(tmp_path / "named.sqlite"))
    secret.chmod(0o600)
    flag = "QUAIL_ANSWER_STORE_FILE" if by_env else "--answer-store-file"
    if by_env:
        monkeypatch.setenv("QUAIL_ANSWER_STORE_FILE", str(secret))
    given = [] if by_env else ["--answer-store-file", secret]
    for stats in _links(tmp_path, secret):
        refused(capsys, *_filter(news, tmp_path / "o.parquet", model_file, "--stats", stats, *given),
                says=f"--stats {stats} is the file that names the answer store ({flag}), which the run never writes")
    assert secret.read_text() == str(tmp_path / "named.sqlite") and (secret.stat().st_mode & 0o777) == 0o600


def test_stats_is_refused_on_the_file_that_names_the_answer_store_with_the_store_off(news, model_file, tmp_path,
                                                                                     capsys):
    secret = tmp_path / "store-url"
    secret.write_text("postgresql+psycopg://quail@db.example:5432/quail")
    secret.chmod(0o600)
    refused(capsys, *_filter(news, tmp_path / "o.parquet", model_file, "--stats", secret, "--no-answer-store",
                             "--answer-store-file", secret), says=f"--stats {secret} is the file that names")
    assert secret.read_text() == "postgresql+psycopg://quail@db.example:5432/quail"


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_stats_is_refused_on_the_answer_stores_database_and_journals(news, model_file, tmp_path, capsys, suffix):
    default = Path(os.environ["QUAIL_ANSWER_STORE"])  # conftest: the test's own
    named = tmp_path / "named.sqlite"
    secret = tmp_path / "store-url"
    secret.write_text(str(named))
    secret.chmod(0o600)
    for database, given in ((default, []), (tmp_path / "given.sqlite", ["--answer-store", tmp_path / "given.sqlite"]),
                            (named, ["--answer-store-file", secret])):
        stats = Path(f"{database}{suffix}")
        stats.write_bytes(b"SQLite format 3\x00")
        refused(capsys, *_filter(news, tmp_path / "o.parquet", model_file, "--stats", stats, *given),
                says=f"--stats {stats} is a file of the answer store, which only the store writes")
        assert stats.read_bytes() == b"SQLite format 3\x00"
    not_yet = tmp_path / "new.sqlite"
    refused(capsys, *_filter(news, tmp_path / "o.parquet", model_file, "--stats", f"{not_yet}{suffix}",
                             "--answer-store", not_yet), says="is a file of the answer store")
    assert not Path(f"{not_yet}{suffix}").exists()


def test_stats_is_refused_on_quails_observed_records(news, model_file, tmp_path, capsys):
    from quail.cost.observed import SelectivityCounts

    record = SelectivityCounts().path  # conftest: the test's own
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("{}")
    refused(capsys, *_filter(news, tmp_path / "o.parquet", model_file, "--stats", record),
            says=f"--stats {record} is Quail's selectivity store, which only Quail writes")
    assert record.read_text() == "{}"


def test_an_output_that_is_another_output_is_refused(news, model_file, tmp_path, capsys):
    out = tmp_path / "o.parquet"
    refused(capsys, *_filter(news, out, model_file, "--stats", out),
            says=f"--stats {out} is also --output {out}: one would overwrite the other")
    review = tmp_path / "review.parquet"
    refused(capsys, *_filter(news, out, model_file, "--stats", review, "--review-output", review,
                             "--cascade", model_file, "--cascade-band", "0.3", "0.7"),
            says=f"--review-output {review} is also --stats {review}: one would overwrite the other")
    assert not out.exists() and not review.exists()
