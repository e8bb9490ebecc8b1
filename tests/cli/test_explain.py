"""cli/explain.py: `quail explain PIPELINE.yaml` prints the plan and its predicted accounting by the
run path of `quail pipeline`, and computes and writes nothing."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli.test_bad_input import MODEL, refused, run


@pytest.fixture
def pipeline(tmp_path):
    pq.write_table(pa.table({"text": ["The striker scored.", "Rates rose."]}), tmp_path / "news.parquet")
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"model": "smollm2-135m", "tables": {"news": str(tmp_path / "news.parquet")},
                                "operators": [{"name": "sport", "filter": {"input": "news", "column": "text",
                                                                           "predicates": ["Sport?", "A goal?"]},
                                               "output": str(tmp_path / "sport.parquet")}]}))
    return path


@pytest.mark.usefixtures("smollm2_for_every_session")
def test_explain_prints_the_plan_and_writes_nothing(capsys, monkeypatch, pipeline, tmp_path):
    monkeypatch.setattr("quail.executor.engine.Engine.run", lambda *a, **k: pytest.fail("computed"))
    code, err, out = run(capsys, "explain", pipeline, *MODEL)
    assert code == 0 and "predicted:" in out and "KV rewind (chain mode): on" in out, err
    code, err, out = run(capsys, "explain", pipeline, *MODEL, "--no-rewind")
    assert code == 0 and "KV rewind (chain mode): off" in out, err
    assert not list(tmp_path.glob("*sport*"))  # no output, stats or temporary file


def test_model_overrides_the_pipelines(capsys, pipeline, tmp_path):
    refused(capsys, "explain", pipeline, "--model", tmp_path / "none.gguf",
            says=f"--model {str(tmp_path / 'none.gguf')!r}: not an embedded model")
