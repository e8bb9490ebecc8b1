"""`quail pipeline` and `quail explain` end to end on the example pipeline (smollm2-135m, fp32)."""

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.errors import QuailError
from quail.pipeline.config import load_pipeline

EXAMPLES = Path(__file__).parents[2] / "examples"
OPERATORS = ["sport", "kind", "by_sport", "by_venue"]


pytestmark = pytest.mark.usefixtures("smollm2_for_every_session")


@pytest.fixture
def pipeline(tmp_path):
    """The example pipeline with a lower threshold, so that smollm2 (P(yes) 0.04-0.27 on every row) passes some rows."""
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work)
    text = (work / "pipeline.yaml").read_text()
    text = text.replace("      predicates:", "      threshold: 0.1\n      predicates:")
    text = text.replace("      condition:", "      threshold: 0.1\n      condition:")
    (work / "pipeline.yaml").write_text(text)
    return work / "pipeline.yaml"


def _cli(*argv):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv] + ["--dtype", "float32"])
    return e.value.code


def _outputs(tmp_path):
    out = {}
    for name in OPERATORS:
        out[name] = pq.read_table(tmp_path / "out" / "pipeline" / f"{name}.parquet").to_pylist()
        out[name + ".stats"] = json.loads((tmp_path / "out" / "pipeline" / f"{name}.parquet.stats.json").read_text())
    return out


@pytest.fixture
def sessions(monkeypatch):
    """The sessions the CLI opens, to look at their arenas afterwards."""
    from quail.session import Session

    opened, open_ = [], Session.open.__func__

    def record(cls, *a, **kw):
        opened.append(open_(cls, *a, **kw))
        return opened[-1]

    monkeypatch.setattr(Session, "open", classmethod(record))
    return opened


def test_pipeline_reuses_kv_across_operators_and_matches_scratch(pipeline, tmp_path, capsys, sessions):
    assert _cli("explain", pipeline) == 0
    plan_text = capsys.readouterr().out
    assert "retain document KV for kind, by_sport, by_venue" in plan_text
    assert "predicted:" in plan_text and "cost model" in plan_text
    assert not (tmp_path / "out").exists()  # explain runs nothing

    assert _cli("pipeline", pipeline) == 0
    engine = sessions[-1].engine
    assert engine.free_pages == engine.settings.arena_pages and len(engine.pool) == 0  # the last consumer released
    reused = _outputs(tmp_path)
    assert _cli("pipeline", pipeline, "--no-reuse") == 0
    scratch = _outputs(tmp_path)
    assert 0 < len(reused["sport"]) < 12
    for name in OPERATORS:
        a, b = reused[name], scratch[name]
        assert len(a) == len(b)
        for x, y in zip(a, b):
            for key in x:
                if isinstance(x[key], float):
                    assert abs(x[key] - y[key]) < 1e-4, (name, key)
                else:
                    assert x[key] == y[key], (name, key)
        s = reused[name + ".stats"]
        assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
        assert s["tokens_naive"] == scratch[name + ".stats"]["tokens_naive"]
        assert s["predicted"]["tokens_naive"] > 0 and s["plan_hash"]
    kind = reused["kind.stats"]
    assert kind["attention"] == "torch" and kind["attention_why"]
    assert kind["tokens_reused"]["retention"] > 0 and kind["document_tokens_computed"] == 0
    assert reused["by_venue.stats"]["tokens_reused"]["retention"] > 0
    err = capsys.readouterr().err
    assert "predicted:" in err and "actual:" in err


def test_observed_selectivity_refines_the_next_plan(pipeline, tmp_path, capsys):
    assert _cli("explain", pipeline) == 0
    assert "selectivity estimate: 0.50" in capsys.readouterr().out
    assert _cli("pipeline", pipeline) == 0
    passed = len(pq.read_table(tmp_path / "out" / "pipeline" / "sport.parquet"))
    capsys.readouterr()
    assert _cli("explain", pipeline) == 0
    assert f"selectivity estimate: {(passed + 1) / 14:.2f}" in capsys.readouterr().out


@pytest.mark.parametrize("text, message", [
    ("operators: []", "needs a list of operators"),
    ("operators:\n  - name: a\n    sort: {}", "exactly one of filter, classify, join"),
    ("operators:\n  - name: a\n    filter: {input: t, column: text}", "filter needs 'predicates'"),
    ("operators:\n  - name: a\n    filter: {input: t, column: text, predicates: [q], colour: red}", "unknown filter keys"),
    ("operators:\n  - name: a\n    filter: {input: nowhere, column: text, predicates: [q]}", "neither a table"),
    ("operators: [", "not valid YAML"),
    ("tables: {news: n.parquet}\noperators:\n  - name: news\n    filter: {input: news, column: text, predicates: [q]}",
     "operator 'news' has the name of a table; rename one of them"),
])
def test_bad_pipelines_name_the_operator_and_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(QuailError, match=message):
        load_pipeline(str(path))
