"""Reuse across tasks at a table far larger than the arena: a filter over 4,000 rows, then a
classify of its output, on a worker with 1,200 pages (about a tenth of the documents' KV). The
worker computes the classify's answers in the filter's jobs, window by window, while each window's
KV is in the arena; the classify task finds them all in the answer store, and its output equals a
run without the store."""

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.airflow_quail.conftest import dags_test, same_rows, worker_jobs

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # `airflow dags test`; the local worker loads a model

ROWS, ARENA_PAGES = 4000, 1200
WORDS = ("match goal team coach market price bank trade rain storm wind cloud river city music film game "
         "player season league stock bond loan sun snow").split()


def _conn(model, **extra) -> str:
    return json.dumps({"conn_type": "quail", "extra": {"model": str(model), "dtype": "float32",
                                                       "arena_pages": ARENA_PAGES, **extra}})


@pytest.mark.test_dags
def test_a_classify_of_a_filters_output_is_computed_ahead_at_any_table_size(airflow_env, tmp_path, tiny_model_dir):
    env, airflow = airflow_env
    rng = random.Random(26)
    source = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": list(range(ROWS)),
                             "text": [" ".join(rng.choices(WORDS, k=rng.randint(20, 40))) for _ in range(ROWS)]}),
                   source)
    outputs, logs = {}, {}
    for store in (True, False):
        out = tmp_path / f"out-{store}"
        logs[store] = dags_test(env, airflow, "quail_scale", QUAIL_TEST_SOURCE=str(source), QUAIL_TEST_OUTPUT=str(out),
                                AIRFLOW_CONN_QUAIL_DEFAULT=_conn(tiny_model_dir, answer_store=store))
        outputs[store] = {t: pq.read_table(out / f"{t}.parquet").to_pylist() for t in ("kept", "topic")}
    kept = len(outputs[True]["kept"])
    assert 0 < kept < ROWS
    for task in ("kept", "topic"):
        same_rows(outputs[True][task], outputs[False][task])
    assert f"computed the answers of topic ahead for {kept} rows, into the answer store" in logs[True]
    assert "ahead" not in logs[False]
    jobs = worker_jobs(tmp_path)  # both runs' windows, the first run's first
    runs = sorted({j["origin"]["run_id"] for j in jobs})
    assert len(runs) == 2
    by_run = {run: {"kept": [], "topic": []} for run in runs}
    for j in jobs:
        by_run[j["origin"]["run_id"]][j["operator"]].append(j)
    with_store, without = (by_run[r] for r in runs)
    ahead = [j["ahead"]["topic"] for j in with_store["kept"]]
    assert sum(a["rows"] for a in ahead) == kept  # every row that passed
    # in parts that fit the arena: every document's KV was still retained when the classify ran ahead
    assert sum(a["document_tokens_computed"] for a in ahead) == 0 and sum(a["retention"] for a in ahead) > 0
    print(f"{kept} of {ROWS} rows passed; computed ahead:", {k: sum(a[k] for a in ahead) for k in ahead[0]})
    found = [j["stats"] for j in with_store["topic"]]
    assert sum(s["tokens_computed"] for s in found) == 0
    assert sum(s["tokens_reused"]["store"] for s in found) == sum(s["tokens_naive"] for s in found) > 0
    assert "tokens' worth of answers in the answer store" in logs[True]
    asked = [j["stats"] for j in without["topic"]]
    assert sum(s["tokens_reused"]["store"] for s in asked) == 0 and sum(s["tokens_computed"] for s in asked) > 0
    for s in found + asked:
        assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
