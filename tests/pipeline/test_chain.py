"""A chain of operators computed window by window: a consumer of an earlier operator's output, read
on the same text column, runs on each window right after its producer, so it finds the window's
documents retained however large the table is. Answers equal computing every prompt from scratch."""

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.pipeline.runner import window_groups
from quail.specs import OperatorSpec


def _spec(name, kind, inputs, column="text", **kw):
    labels = ("a", "b") if kind == "classify" else ()
    columns = (column,) * len(inputs) if kind != "join" else (column, "name")
    return OperatorSpec(name, kind, tuple(inputs), columns, ("Q?",), labels, **kw)


def test_chains_follow_a_producers_rows_on_its_column():
    specs = (_spec("f", "filter", ["t"]), _spec("c", "classify", ["f"]), _spec("g", "filter", ["c"]),
             _spec("j", "join", ["g", "u"]), _spec("k", "classify", ["j"]),  # a join's output is new rows
             _spec("o", "classify", ["f"], column="title"),  # another column: other documents
             _spec("h", "filter", ["u"]), _spec("m", "join", ["f", "h"]))  # its right side runs later
    assert [[s.name for s in g] for g in window_groups(specs, {"t", "u"})] == \
        [["f", "c", "g", "j"], ["k"], ["o"], ["h"], ["m"]]


@pytest.fixture
def table(tmp_path):
    rng = random.Random(7)
    words = "alpha beta gamma delta river stone cloud market engine garden orbit signal".split()
    texts = [" ".join(rng.choices(words, k=rng.randint(20, 50))) for _ in range(240)]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path)
    return path


def _pipeline(tmp_path, table, name: str) -> tuple:
    doc = {"tables": {"t": str(table)}, "operators": [
        {"name": "f", "filter": {"input": "t", "column": "text", "predicates": ["Is it about a river?"],
                                 "threshold": 0.0}, "output": f"{name}-f.parquet"},
        {"name": "c", "classify": {"input": "f", "column": "text", "labels": ["nature", "money", "space"]},
         "output": f"{name}-c.parquet"}]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(doc))
    return path, tmp_path / f"{name}-c.parquet", tmp_path / f"{name}-c.parquet.stats.json"


def test_a_consumer_finds_every_document_retained_in_an_arena_far_smaller_than_the_table(
        tmp_path, table, tiny_model_dir):
    """240 documents of about 5 pages in a 200-page arena (a 168-page pool): operator by operator,
    the classify would find only what the pool held at the filter's end."""
    base = ["--model", str(tiny_model_dir), "--dtype", "float32", "--arena-pages", "200", "--max-batch-tokens", "256"]
    chained, out, stats = _pipeline(tmp_path, table, "chain")
    scratch, scratch_out, _ = _pipeline(tmp_path, table, "scratch")
    for path, extra in ((chained, []), (scratch, ["--no-reuse"])):
        with pytest.raises(SystemExit) as e:
            main(["pipeline", str(path), *base, *extra])
        assert e.value.code == 0
    s = json.loads(stats.read_text())
    assert s["document_tokens_computed"] == 0  # every document came from the filter's retained KV
    assert s["tokens_reused"]["retention"] > 0
    assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
    a, b = pq.read_table(out), pq.read_table(scratch_out)
    assert a.num_rows == b.num_rows == 240 and a.column("label").to_pylist() == b.column("label").to_pylist()
    for label in ("nature", "money", "space"):
        x, y = a.column(f"p_{label}").to_pylist(), b.column(f"p_{label}").to_pylist()
        assert max(abs(p - q) for p, q in zip(x, y)) < 1e-4
