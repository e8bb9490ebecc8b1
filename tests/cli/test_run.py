"""cli/run.py: the operator commands (filter, classify, join) and `quail pipeline` end to end on the
embedded smollm2-135m, and their errors on bad input."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main

TEXTS = [
    "The striker scored a hat-trick as the home team won the derby.",
    "Quarterly profits rose as the bank cut costs and raised fees.",
    "The new laptop ships with a faster chip and a brighter screen.",
    "The goalkeeper saved two penalties in the shoot-out.",
    "Parliament voted on the new budget after a long debate.",
]


pytestmark = pytest.mark.usefixtures("smollm2_for_every_session")


@pytest.fixture
def news(tmp_path):
    path = tmp_path / "news.parquet"
    pq.write_table(pa.table({"id": list(range(len(TEXTS))), "text": TEXTS}), path)
    return path


def run_cli(*argv):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv] + ["--model", "smollm2-135m", "--dtype", "float32"])
    return e.value.code


def fails(capsys, *argv, match):
    assert run_cli(*argv) == 2
    err = capsys.readouterr().err
    assert "quail: error:" in err and match in err, err
    assert "Traceback" not in err


def test_filter_keep_all_and_no_reuse_agree(tmp_path, news):
    preds = ["--predicate", "Is this about sport?", "--predicate", "Is a goal or a save mentioned?"]
    out, out2, stats = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "s.json"
    assert run_cli("filter", news, "--text-column", "text", *preds, "--keep-all", "--threshold", "0.2",
                 "--output", out, "--stats", stats) == 0
    assert run_cli("filter", news, "--text-column", "text", *preds, "--keep-all", "--threshold", "0.2",
                 "--output", out2, "--no-reuse") == 0
    a, b = pq.read_table(out), pq.read_table(out2)
    assert a.column_names == ["id", "text", "passed", "p_yes_1", "p_yes_2"]
    assert a["passed"].to_pylist() == b["passed"].to_pylist()
    for col in ("p_yes_1", "p_yes_2"):
        for x, y in zip(a[col].to_pylist(), b[col].to_pylist()):
            assert (x is None) == (y is None) and (x is None or abs(x - y) < 1e-4)
    s = json.loads(stats.read_text())
    for key in ("tokens_naive", "tokens_computed", "document_tokens_computed", "question_tokens_computed",
                "tokens_reused", "forward_passes", "pages_total", "pages_peak", "seconds"):
        assert key in s
    assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]


def test_filter_output_holds_passing_rows_unchanged(tmp_path, news):
    out = tmp_path / "f.parquet"
    assert run_cli("filter", news, "--text-column", "text", "--predicate", "Is this about sport?",
                 "--threshold", "0", "--limit", "2", "--output", out) == 0
    assert pq.read_table(out).to_pydict() == {"id": [0, 1], "text": TEXTS[:2]}


def test_classify_adds_label_and_probabilities(tmp_path, news):
    out = tmp_path / "c.parquet"
    assert run_cli("classify", news, "--text-column", "text", "--label", "sport", "--label", "money",
                 "--label", "sports news", "--output", out) == 0
    t = pq.read_table(out)
    assert t.column_names == ["id", "text", "label", "p_sport", "p_money", "p_sports news"]
    for row in t.to_pylist():
        probs = [row["p_sport"], row["p_money"], row["p_sports news"]]
        assert abs(sum(probs) - 1) < 1e-6
        assert row["label"] == ["sport", "money", "sports news"][probs.index(max(probs))]


def test_join_outputs_prefixed_pairs(tmp_path, news):
    right = tmp_path / "topics.csv"
    right.write_text("topic\nfootball\nfinance\n")
    out = tmp_path / "j.parquet"
    assert run_cli("join", news, right, "--left-column", "text", "--right-column", "topic",
                 "--condition", "Document A is about the topic in document B.", "--threshold", "0",
                 "--output", out) == 0
    t = pq.read_table(out)
    assert t.column_names == ["left_id", "left_text", "right_topic", "p_yes", "rank"]
    assert t.num_rows == len(TEXTS) * 2


def test_empty_input_gives_empty_output(tmp_path):
    src, out = tmp_path / "empty.parquet", tmp_path / "o.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), src)
    assert run_cli("filter", src, "--text-column", "text", "--predicate", "Sport?", "--output", out) == 0
    assert pq.read_table(out).num_rows == 0


def test_null_rows_fail_or_are_skipped(tmp_path, capsys):
    src, out = tmp_path / "nulls.parquet", tmp_path / "o.parquet"
    pq.write_table(pa.table({"text": ["A football match.", None, "Stocks fell."]}), src)
    fails(capsys, "filter", src, "--text-column", "text", "--predicate", "Sport?", "--output", out,
          match="row 1 of column 'text' is NULL")
    assert not out.exists()
    stats = tmp_path / "s.json"
    assert run_cli("filter", src, "--text-column", "text", "--predicate", "Sport?", "--keep-all",
                 "--on-null", "skip", "--output", out, "--stats", stats) == 0
    assert pq.read_table(out)["passed"].to_pylist()[1] is None
    assert json.loads(stats.read_text())["rows_skipped"] == 1


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--text-column", "body", "--predicate", "Sport?"], "no column 'body'"),
        (["--text-column", "id", "--predicate", "Sport?"], "column 'id' is int64, not text"),
        (["--text-column", "text"], "give at least one predicate"),
        (["--text-column", "text", "--predicate", " "], "--predicate 1 is empty"),
        (["--text-column", "text", "--predicate", "Sport?", "--threshold", "1.5"], "outside [0, 1]"),
        (["--text-column", "text", "--predicate", "Sport?", "--arena-pages", "2"], "--arena-pages 2 is too small"),
    ],
)
def test_bad_filter_input(tmp_path, news, capsys, argv, match):
    out = tmp_path / "o.parquet"
    fails(capsys, "filter", news, *argv, "--output", out, match=match)
    assert not out.exists() and not list(tmp_path.glob(".o.parquet*"))


def test_missing_file_and_empty_text(tmp_path, capsys):
    fails(capsys, "filter", tmp_path / "nope.csv", "--text-column", "t", "--predicate", "x", "--output",
          tmp_path / "o.parquet", match="nope.csv: no such file")
    src = tmp_path / "e.csv"
    src.write_text('text\n"fine"\n"  "\n')
    fails(capsys, "filter", src, "--text-column", "text", "--predicate", "x", "--output", tmp_path / "o.parquet",
          match="row 1 of column 'text' is empty")


def test_duplicate_labels(tmp_path, news, capsys):
    fails(capsys, "classify", news, "--text-column", "text", "--label", "a", "--label", "b", "--label", "a",
          "--output", tmp_path / "o.parquet", match="duplicate labels ['a']")


SHORT_CONTEXT = 1024


@pytest.fixture(scope="module")
def short_context_dir(tiny_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("short-context") / "model"
    shutil.copytree(tiny_model_dir, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"max_position_embeddings": SHORT_CONTEXT}))
    return path


@pytest.fixture
def short_context_model(short_context_dir, monkeypatch):
    """The tiny model with a context of SHORT_CONTEXT positions, loaded for real (this module's
    sessions are otherwise smollm2's): a document longer than the context costs a fraction of a
    second, where smollm2's 8,192 positions cost a minute and a half."""
    from quail.model.loader import load_model

    monkeypatch.setattr("quail.session.load_model", load_model)
    return short_context_dir


def run_short(model: Path, *argv) -> int:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv] + ["--model", str(model), "--dtype", "float32"])
    return e.value.code


def test_document_longer_than_context(tmp_path, capsys, short_context_model):
    src, out, stats = tmp_path / "long.parquet", tmp_path / "o.parquet", tmp_path / "s.json"
    pq.write_table(pa.table({"text": ["short one", None, "word " * (SHORT_CONTEXT + 100)]}), src)
    # the error names the input row, also when --on-null skip left a row out before it
    assert run_short(short_context_model, "filter", src, "--text-column", "text", "--predicate", "Sport?",
                     "--on-null", "skip", "--output", out) == 2
    err = capsys.readouterr().err
    assert "quail: error: row 2: the document is" in err and "Traceback" not in err, err
    assert not out.exists()
    pq.write_table(pa.table({"text": ["short one", "word " * (SHORT_CONTEXT + 100)]}), src)
    assert run_short(short_context_model, "filter", src, "--text-column", "text", "--predicate", "Sport?",
                     "--truncate", "--keep-all", "--output", out, "--stats", stats) == 0
    assert json.loads(stats.read_text())["rows_truncated"] == 1


def test_a_cell_far_beyond_the_context_never_reaches_the_tokenizer_whole(tmp_path, capsys, monkeypatch,
                                                                         short_context_model):
    """A cell larger than the context could ever hold is refused by its length, or cut before it is
    tokenized: a 50 MB cell took 3 minutes and 8 GB in the tokenizer."""
    from quail.model.tokenizer import Tokenizer
    from quail.ops.prompts import MAX_CHARS_PER_TOKEN

    longest = [0]
    encode = Tokenizer.encode_batch

    def measured(self, texts, *args, **kwargs):
        longest[0] = max([longest[0], *map(len, texts)])
        return encode(self, texts, *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "encode_batch", measured)
    src, out, stats = tmp_path / "huge.parquet", tmp_path / "o.parquet", tmp_path / "s.json"
    huge = "word " * 2_000_000  # 10 million characters
    pq.write_table(pa.table({"text": ["short one", huge]}), src)
    assert run_short(short_context_model, "filter", src, "--text-column", "text", "--predicate", "Sport?",
                     "--output", out) == 2
    err = capsys.readouterr().err
    assert "quail: error: row 1: the document is 10,000,000 characters, far more than the model's context" in err
    assert not out.exists()
    assert run_short(short_context_model, "filter", src, "--text-column", "text", "--predicate", "Sport?",
                     "--truncate", "--keep-all", "--output", out, "--stats", stats) == 0
    assert json.loads(stats.read_text())["rows_truncated"] == 1
    assert longest[0] <= (SHORT_CONTEXT + 1) * MAX_CHARS_PER_TOKEN + 100  # the cut text and its heading


def test_explain_runs_nothing_and_each_mechanism_switches_off(tmp_path, news, capsys):
    base = ["filter", news, "--text-column", "text", "--predicate", "Sport?", "--predicate", "A goal?",
            "--threshold", "0"]
    assert run_cli(*base, "--explain") == 0
    out = capsys.readouterr().out
    assert "KV rewind (chain mode): on" in out and "prefix sharing: on" in out and "predicted:" in out
    assert "device cpu (" in out and "GiB of weights" in out and "1 GiB of KV, the CPU default" in out
    stats = tmp_path / "s.json"
    base.append("--no-answer-store")  # the same rows again: the store would answer them all
    assert run_cli(*base, "--output", tmp_path / "o.parquet", "--stats", stats) == 0
    on = json.loads(stats.read_text())
    assert on["tokens_reused"]["sharing"] > 0  # the rows share the chat preamble's first page
    assert run_cli(*base, "--output", tmp_path / "o.parquet", "--stats", stats, "--no-prefix-sharing") == 0
    off = json.loads(stats.read_text())
    assert off["tokens_reused"]["sharing"] == 0 and off["tokens_reused"]["rewind"] == on["tokens_reused"]["rewind"]
    assert run_cli(*base, "--output", tmp_path / "o.parquet", "--stats", stats, "--no-rewind") == 0
    assert json.loads(stats.read_text())["tokens_reused"]["rewind"] == 0


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_a_device_the_machine_lacks_is_refused_naming_the_flag(tmp_path, news, capsys):
    out = tmp_path / "out.parquet"
    fails(capsys, "filter", news, "--text-column", "text", "--predicate", "Sport?", "--output", out,
          "--device", "cuda", match="--device cuda: torch")
    fails(capsys, "filter", news, "--text-column", "text", "--predicate", "Sport?", "--output", out,
          "--device", "gpu9", match="--device 'gpu9': choose auto")
    assert not out.exists()
    with pytest.raises(SystemExit) as e:
        main(["worker", "serve", "--socket", str(tmp_path / "w.sock"), "--device", "cuda:1"])
    assert e.value.code == 2 and "--device cuda:1" in capsys.readouterr().err


def test_outputs_and_stats_that_cannot_be_written_are_refused_before_the_model_loads(tmp_path, news, capsys,
                                                                                     monkeypatch):
    def computes(*args, **kwargs):
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr("quail.session.Session.open", computes)
    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    base = ["filter", news, "--text-column", "text", "--predicate", "Sport?"]
    fails(capsys, *base, "--output", tmp_path / "x.csv", match="--output")
    fails(capsys, *base, "--output", a_file / "o.parquet", match="is a file, not a folder")
    fails(capsys, *base, "--output", "/proc/o.parquet", match="cannot write in /proc")
    fails(capsys, *base, "--output", news, match="is one of the inputs")
    out = tmp_path / "o.parquet"
    fails(capsys, *base, "--output", out, "--stats", a_file / "s.json", match="--stats")
    before = Path(news).read_bytes()
    fails(capsys, *base, "--output", out, "--stats", news, match=f"--stats {news} is one of the inputs")
    fails(capsys, *base, "--output", out, "--stats", out, match=f"--stats {out} is also --output {out}")
    assert Path(news).read_bytes() == before
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["news.parquet", "plain.txt"]


def test_pipeline_outputs_and_stats_that_collide_are_refused(tmp_path, news, capsys):
    """Two operators writing one file, or a stats file that is an output, would overwrite each other."""
    def pipeline(**files):
        ops = [{"name": "a", "filter": {"input": "news", "column": "text", "predicates": ["Sport?"]}},
               {"name": "b", "filter": {"input": "news", "column": "text", "predicates": ["Rates?"]}}]
        for op in ops:
            op.update({k.split("_")[1]: str(tmp_path / v) for k, v in files.items() if k.startswith(op["name"])})
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"tables": {"news": str(news)}, "operators": ops}))
        return path

    fails(capsys, "pipeline", pipeline(a_output="o.parquet", b_output="o.parquet"),
          match=f"operator 'b': output {tmp_path / 'o.parquet'} is also operator 'a': output")
    fails(capsys, "pipeline", pipeline(a_output="o.parquet", b_output="p.parquet", b_stats="o.parquet"),
          match=f"operator 'b': stats {tmp_path / 'o.parquet'} is also operator 'a': output")
    assert not (tmp_path / "o.parquet").exists()


def test_a_budget_refuses_a_plan_that_predicts_more_before_computing(tmp_path, news, capsys):
    """--max-tokens for every operator, max_tokens: for one; a pipeline's own wins. The stop at the
    window that passes a budget is the window driver's (tests/pipeline/test_windows.py)."""
    out, stats = tmp_path / "o.parquet", tmp_path / "s.json"
    filter_ = ("filter", news, "--text-column", "text", "--predicate", "Is this about sport?", "--output", out)
    fails(capsys, *filter_, "--max-tokens", "10",
          match="operator 'filter': the plan predicts ")
    assert not out.exists()
    assert run_cli(*filter_, "--stats", stats) == 0
    computed = json.loads(stats.read_text())["tokens_computed"]
    assert run_cli(*filter_, "--max-tokens", computed, "--no-answer-store") == 0  # the prediction is exact

    def pipeline(budget):
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"tables": {"news": str(news)}, "operators": [
            {"name": "a", "filter": {"input": "news", "column": "text", "predicates": ["Sport?"]},
             "output": str(tmp_path / "a.parquet"), "max_tokens": budget}]}))
        return path

    fails(capsys, "pipeline", pipeline(5), "--max-tokens", 10**9, match="over its budget (max_tokens 5)")
    fails(capsys, "pipeline", pipeline("lots"), match="operator 'a': max_tokens must be a whole number above 0")


def test_classify_with_label_descriptions_and_top_2(tmp_path, news):
    """Descriptions change the prompt, so answers stored without them are not found with them; top_k
    adds the second label and both probabilities."""
    out, stats = tmp_path / "o.parquet", tmp_path / "s.json"
    plain = ["classify", news, "--text-column", "text", "--label", "sport", "--label", "business", "--label", "tech"]
    described = ["classify", news, "--text-column", "text", "--label", "sport=football, tennis, racing",
                 "--label", "business=companies, markets, money", "--label", "tech=computers, phones, software"]
    reused = []
    for argv in (plain, plain, described):
        assert run_cli(*argv, "--output", out, "--stats", stats, "--top-k", "2") == 0
        reused.append(json.loads(stats.read_text())["tokens_reused"]["store"])
    assert reused[0] == 0 < reused[1] and reused[2] == 0  # the described run found nothing the plain ones stored
    t = pq.read_table(out).to_pylist()
    for row in t:
        ps = sorted(((row[f"p_{x}"], x) for x in ("sport", "business", "tech")), key=lambda p: -p[0])
        assert (row["label"], row["label_2"]) == (ps[0][1], ps[1][1])
        assert (row["p_label"], row["p_label_2"]) == (ps[0][0], ps[1][0])


def test_explain_describes_a_cascade_whose_band_is_chosen_in_the_run(news, capsys, tiny_model_dir):
    assert run_cli("filter", news, "--text-column", "text", "--predicate", "Is it sport?", "--explain",
                   "--cascade", tiny_model_dir, "--cascade-target", "precision=0.9") == 0
    out, err = capsys.readouterr()
    assert "a band chosen for precision >= 0.9 (delta 0.05) on 400 rows of the first window" in out, err
