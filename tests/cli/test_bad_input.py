"""Issue 14, section 4: bad input of every kind gets `quail: error: ...` naming the row, column,
key or flag, exit 2, and leaves nothing behind; never a traceback. Each case below broke before
(a traceback, or silently wrong). Then a property-based fuzz of the CLI and the pipeline YAML."""

import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quail.cli.main import main

pytestmark = pytest.mark.usefixtures("smollm2_for_every_session")
MODEL = ["--model", "smollm2-135m", "--dtype", "float32"]


def run(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return e.value.code, err, out


def refused(capsys, *argv, says: str) -> None:
    code, err, _ = run(capsys, *argv)
    assert code == 2 and "quail: error:" in err and says in err, err


@pytest.fixture
def news(tmp_path) -> Path:
    path = tmp_path / "news.parquet"
    pq.write_table(pa.table({"text": ["The striker scored.", "Rates rose."]}), path)
    return path


def _filter(source, out, *extra):
    return ["filter", source, "--text-column", "text", "--predicate", "Is this about sport?", "--output", out,
            *MODEL, *extra]


def test_invalid_utf8_is_named_by_row_in_parquet_and_csv(tmp_path, capsys):
    bad = pa.array([b"fine", b"bad \xff\xfe text"], pa.binary())
    pq.write_table(pa.table({"text": bad}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"text": bad}).cast(pa.schema([("text", pa.string())]), safe=False), tmp_path / "s.parquet")
    (tmp_path / "b.csv").write_bytes(b"text\n\"fine\"\n\"bad \xff\xfe\"\n")
    for source in ("b.parquet", "s.parquet", "b.csv"):
        refused(capsys, *_filter(tmp_path / source, tmp_path / "o.parquet"),
                says="row 1 of column 'text' is not valid UTF-8")
    assert not (tmp_path / "o.parquet").exists()


def test_bad_flags_are_refused(news, tmp_path, capsys):
    refused(capsys, *_filter(news, tmp_path / "o.parquet", "--threads", "-1"), says="--threads must be at least 1")
    refused(capsys, *_filter(news, tmp_path / "o.parquet", "--arena-pages", "1000000000"),
            says="--arena-pages 1,000,000,000")
    assert not (tmp_path / "o.parquet").exists()


def test_a_budget_beyond_two_to_the_31_is_taken():
    """A large GPU job computes more than 2^31 - 1 tokens."""
    from quail.cli.main import parser

    args = parser().parse_args(["filter", "in.parquet", "--text-column", "text", "--predicate", "Q?", "--output",
                                "o.parquet", "--max-tokens", "5000000000"])
    assert args.max_tokens == 5_000_000_000


def test_settings_out_of_range_are_refused_by_the_spec_checks(news, tmp_path, capsys):
    """The command line's settings are checked where a pipeline file's are, before any computing."""
    refused(capsys, *_filter(news, tmp_path / "o.parquet", "--limit", "0"),
            says="limit must be a positive number of rows, on a filter")
    refused(capsys, "join", news, news, "--left-column", "text", "--right-column", "text", "--condition", " ",
            "--output", tmp_path / "o.parquet", *MODEL, says="give at least one non-empty condition")
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("settings_, says", [
    ({"threshold": "abc"}, "'threshold' must be a number, got 'abc'"),
    ({"limit": "2"}, "'limit' must be a whole number of rows, got '2'"),
    ({"limit": 1.5}, "'limit' must be a whole number of rows, got 1.5"),
    ({"keep_all": "yes"}, "'keep_all' must be true or false"),
    ({"column": ["text"]}, "'column' must be a name"),
])
def test_pipeline_settings_of_the_wrong_type_are_refused(news, tmp_path, capsys, settings_, says):
    doc = {"tables": {"n": str(news)}, "operators": [
        {"name": "f", "filter": {"input": "n", "column": "text", "predicates": ["Sport?"], **settings_},
         "output": "o.parquet"}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    refused(capsys, "pipeline", tmp_path / "p.yaml", *MODEL, says=f"operator 'f': {says}")
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("text, says", [
    ("tables: {t: 123}\noperators: [{name: f, filter: {input: t, column: text, predicates: [x]}}]\n",
     "table 't' must be a file path, got 123"),
    ("tables: {n: news.parquet}\noperators:\n  - {name: f, filter: {input: n, column: text, predicates: [x]}, "
     "outptu: o.parquet}\n", "operator 'f': unknown keys ['outptu']"),
    ("tables: {n: news.parquet}\nmodle: x\noperators: [{name: f, filter: {input: n, column: text, predicates: [x]}}]\n",
     "unknown keys ['modle']"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nmodel: [*b, *b, *b, *b]\n"
     "tables: {n: news.parquet}\noperators: [{name: f, filter: {input: n, column: text, predicates: [x]}}]\n",
     "aliases (*name) are not allowed"),
])
def test_pipeline_files_with_bad_structure_are_refused(news, tmp_path, capsys, text, says):
    (tmp_path / "p.yaml").write_text(text)
    refused(capsys, "pipeline", tmp_path / "p.yaml", *MODEL, says=says)


def test_an_input_with_two_columns_of_one_name_is_refused_by_column_and_path(news, tmp_path, capsys):
    twice = pa.Table.from_arrays([pa.array(["The striker scored."]), pa.array(["x"]), pa.array([1])],
                                 names=["text", "text", "id"])
    pq.write_table(twice, tmp_path / "text.parquet")
    pq.write_table(twice.rename_columns(["text", "id", "id"]), tmp_path / "id.parquet")
    (tmp_path / "text.csv").write_text("text,text\nThe striker scored.,x\n")
    for name, column in (("text.parquet", "text"), ("id.parquet", "id"), ("text.csv", "text")):
        refused(capsys, *_filter(tmp_path / name, tmp_path / "o.parquet"),
                says=f"input {tmp_path / name}: more than one column is named {column!r}")
        refused(capsys, "join", news, tmp_path / name, "--left-column", "text", "--right-column", "text",
                "--condition", "Same?", "--output", tmp_path / "o.parquet", *MODEL,
                says=f"input {tmp_path / name}: more than one column is named {column!r}")
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("name, says", [("../../escaped", "holds the path separator '/'"),
                                        ("a\x00b", "holds the control character '\\x00'"),
                                        ("..", "is a folder's name"), ("", "is empty"), (None, "name must be text")])
def test_an_operator_name_that_is_no_file_name_is_refused_before_anything_is_written(news, tmp_path, capsys,
                                                                                     monkeypatch, name, says):
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))  # the scratch folder: "../.." would land in tmp_path
    doc = {"tables": {"n": str(news)}, "operators": [
        {"name": name, "filter": {"input": "n", "column": "text", "predicates": ["Sport?"]}},
        {"name": "g", "filter": {"input": name, "column": "text", "predicates": ["Money?"]}, "output": "o.parquet"}]}
    (folder / "p.yaml").write_text(yaml.safe_dump(doc))
    before = sorted(tmp_path.rglob("*"))
    refused(capsys, "pipeline", folder / "p.yaml", *MODEL, says=says)
    assert sorted(tmp_path.rglob("*")) == before


def test_damaged_selectivity_counts_are_set_aside_and_the_run_goes_on(news, tmp_path, capsys):
    counts = tmp_path / "quail-home" / "selectivity.json"  # conftest's private one
    counts.parent.mkdir(parents=True, exist_ok=True)
    counts.write_text('[{"rows": "many"}]')
    code, _, _ = run(capsys, *_filter(news, tmp_path / "o.parquet"))
    assert code == 0 and (tmp_path / "o.parquet").exists()
    [aside] = counts.parent.glob("selectivity.json.corrupt-*")
    assert aside.read_text() == '[{"rows": "many"}]' and list(json.loads(counts.read_text()).values()) == [
        {"rows": 2, "passed": pq.read_table(tmp_path / "o.parquet").num_rows}]


def test_a_header_only_csv_gives_an_empty_output(tmp_path, capsys):
    (tmp_path / "h.csv").write_text("text\n")
    code, _, _ = run(capsys, *_filter(tmp_path / "h.csv", tmp_path / "o.parquet"))
    assert code == 0 and pq.read_table(tmp_path / "o.parquet").num_rows == 0


def test_a_dictionary_encoded_text_column_is_read(tmp_path, capsys):
    texts = ["The striker scored.", "Rates rose.", "The striker scored."]
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), tmp_path / "d.parquet")
    code, _, _ = run(capsys, *_filter(tmp_path / "d.parquet", tmp_path / "o.parquet", "--keep-all"))
    assert code == 0 and pq.read_table(tmp_path / "o.parquet").column("text").to_pylist() == texts


def test_a_5mb_csv_document_is_read_and_truncate_is_predicted_truly(tmp_path, capsys):
    (tmp_path / "big.csv").write_text('text\n"' + "word " * 1_100_000 + '"\n')
    code, _, out = run(capsys, *_filter(tmp_path / "big.csv", tmp_path / "o.parquet", "--truncate", "--explain"))
    predicted = int(out.split("predicted: ")[1].split(" computed")[0].replace(",", ""))
    assert code == 0 and predicted <= 8192  # smollm2's context, not the 1.1 million tokens of the document


LONG = "word " * 8300  # past smollm2's context of 8,192 tokens


@pytest.mark.parametrize("argv, says", [
    (["filter", "{news}", "--text-column", "text", "--predicate", "Sport?", "--predicate", LONG],
     "operator 'filter': predicate 2 is 8,3"),
    (["classify", "{news}", "--text-column", "text", "--label", "a", "--label", "b", "--question", LONG],
     "operator 'classify': question with its labels is 8,3"),
    (["join", "{news}", "{news}", "--left-column", "text", "--right-column", "text", "--condition", LONG],
     "operator 'join': condition is 8,3"),
])
def test_a_question_longer_than_the_context_is_refused_before_any_computing(news, tmp_path, capsys, monkeypatch,
                                                                           argv, says):
    monkeypatch.setattr("quail.executor.engine.Engine.run", lambda *a, **k: pytest.fail("computed"))
    argv = [a.format(news=news) for a in argv]
    for truncate in (["--truncate"], []):
        code, err, _ = run(capsys, *argv, "--output", tmp_path / "o.parquet", *MODEL, *truncate)
        assert code == 2 and f"quail: error: {says}" in err, err
        assert "tokens with its prompt, which leaves 0 of the model's 8,192-token context" in err
    assert not (tmp_path / "o.parquet").exists()


def test_a_long_predicate_of_a_later_operator_is_refused_before_the_first_runs(news, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("quail.executor.engine.Engine.run", lambda *a, **k: pytest.fail("computed"))
    doc = {"tables": {"n": str(news)}, "operators": [
        {"name": "short", "filter": {"input": "n", "column": "text", "predicates": ["Sport?"]}, "output": "a.parquet"},
        {"name": "long", "filter": {"input": "short", "column": "text", "predicates": [LONG]},
         "output": "b.parquet"}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    refused(capsys, "pipeline", tmp_path / "p.yaml", *MODEL, "--truncate", says="operator 'long': predicate is 8,3")
    assert not (tmp_path / "a.parquet").exists()


# The fuzz: any argv or pipeline file either runs up to the model (stopped there: nothing is computed)
# or is refused with `quail: error:`; nothing else escapes, and a refused run leaves no file.

class _WouldCompute(Exception):
    pass


FLAGS = ["--text-column", "--predicate", "--output", "--stats", "--threshold", "--limit", "--keep-all", "--threads",
         "--arena-pages", "--max-batch-tokens", "--window-rows", "--on-null", "--device", "--dtype", "--truncate",
         "--explain", "--gpu-memory-utilization"]
VALUES = st.sampled_from(["text", "nope", "-1", "0", "1", "2.5", "nan", "inf", "abc", "", "skip", "fail", "cpu",
                          "cuda", "o.parquet", "o.csv", "/proc/x.parquet", "sub/o.parquet", "s.json", "news.parquet",
                          "1e309", "float32", "\x00", "é"])


COMMANDS = {"filter": ["news.parquet", "--text-column", "text", "--predicate", "Sport?", "--output", "o.parquet"],
            "classify": ["news.parquet", "--text-column", "text", "--label", "a", "--label", "b", "--output",
                         "o.parquet"],
            "join": ["news.parquet", "news.parquet", "--left-column", "text", "--right-column", "name", "--condition",
                     "Same?", "--output", "o.parquet"]}


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(command=st.sampled_from(list(COMMANDS)), drop=st.integers(0, 12),
       argv=st.lists(st.one_of(st.sampled_from(FLAGS), VALUES), max_size=6))
def test_fuzzed_command_lines_are_refused_cleanly_or_reach_the_model(tmp_path_factory, command, drop, argv,
                                                                    monkeypatch_module):
    """A valid command line, maybe cut short, with flags and values added."""
    base = COMMANDS[command][:len(COMMANDS[command]) - drop]
    _fuzz(tmp_path_factory.mktemp("cli"), lambda d: [command, *base, *argv], monkeypatch_module)


KEYS = st.sampled_from(["model", "tables", "operators", "name", "filter", "classify", "join", "input", "column",
                        "predicates", "labels", "question", "threshold", "limit", "keep_all", "left", "right",
                        "left_column", "right_column", "condition", "output", "stats", "n", "extra"])
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), VALUES)
TREES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=st.dictionaries(KEYS, TREES, max_size=4),
       base=st.sampled_from([None, {"tables": {"n": "news.parquet"}, "operators": [
           {"name": "f", "filter": {"input": "n", "column": "text", "predicates": ["x"]}, "output": "o.parquet"}]}]))
def test_fuzzed_pipeline_files_are_refused_cleanly_or_reach_the_model(tmp_path_factory, doc, base, monkeypatch_module):
    def argv(d: Path):
        merged = {**(base or {}), **doc}
        (d / "p.yaml").write_text(yaml.safe_dump(merged, allow_unicode=True))
        return ["pipeline", d / "p.yaml"]

    _fuzz(tmp_path_factory.mktemp("yaml"), argv, monkeypatch_module)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _fuzz(d: Path, make_argv, mp) -> None:
    pq.write_table(pa.table({"text": ["The striker scored.", "Rates rose."], "name": ["a", "b"]}), d / "news.parquet")

    def would_compute(*args, **kwargs):
        raise _WouldCompute()

    mp.setattr("quail.session.Session.open", would_compute)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        argv = [str(a) for a in make_argv(d)] + MODEL
        before = set(os.listdir(d))
        try:
            main(argv)
        except _WouldCompute:
            return
        except SystemExit as e:
            assert e.code in (0, 2), (argv, e.code)
        assert set(os.listdir(d)) <= before, argv  # a refused run leaves nothing behind
    finally:
        os.chdir(cwd)


def test_stats_never_replaces_a_device_a_fifo_the_model_or_the_pipeline_file(news, tmp_path, capsys):
    """#33 item 7: each is refused before the model loads, and left as it was."""
    import stat

    fifo = tmp_path / "stats.fifo"
    os.mkfifo(fifo)
    refused(capsys, *_filter(news, tmp_path / "o.parquet", "--stats", fifo), says="is not a regular file (a FIFO)")
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    if os.geteuid() == 0:
        null = tmp_path / "null"
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        refused(capsys, *_filter(news, tmp_path / "o.parquet", "--stats", null),
                says="is not a regular file (a character device)")
        assert stat.S_ISCHR(null.stat().st_mode)
    model = tmp_path / "weights.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    argv = [a if a != "smollm2-135m" else model for a in _filter(news, tmp_path / "o.parquet", "--stats", model)]
    refused(capsys, *argv, says=f"is a file of the model {model}, which the run never writes")
    assert model.read_bytes() == b"GGUF" + bytes(60)
    pipeline = tmp_path / "p.yaml"
    text = yaml.safe_dump({"tables": {"news": str(news)}, "operators": [
        {"name": "f", "filter": {"input": "news", "column": "text", "predicates": ["Sport?"]},
         "output": str(tmp_path / "f.parquet"), "stats": str(pipeline)}]})
    pipeline.write_text(text)
    refused(capsys, "pipeline", pipeline, *MODEL, says="is the pipeline file, which the run never writes")
    assert pipeline.read_text() == text and not (tmp_path / "o.parquet").exists()


def test_a_pipeline_nested_beyond_recursion_is_refused(capsys, tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("operators: " + "[" * 100_000 + "]" * 100_000 + "\n")
    refused(capsys, "explain", deep, says="nested too deep to be a pipeline")

