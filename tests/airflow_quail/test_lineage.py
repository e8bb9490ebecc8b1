"""OpenLineage datasets named by the OpenLineage naming conventions, without opening a connection."""

import json

from airflow_quail.lineage import dataset_name, operator_lineage


def test_dataset_names(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_DB", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "l.db")}))
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps({"conn_type": "postgres", "host": "db.internal",
                                                             "login": "u", "schema": "sales"}))
    assert dataset_name(str(tmp_path / "a.parquet")) == ("file", str(tmp_path / "a.parquet"))
    assert dataset_name(f"file://{tmp_path}/a.parquet") == ("file", str(tmp_path / "a.parquet"))
    assert dataset_name("s3://aws_default@bucket/in/a.parquet") == ("s3://bucket", "in/a.parquet")
    assert dataset_name("sql://lake_db/jokes") == (f"sqlite://{tmp_path / 'l.db'}", "jokes")
    assert dataset_name("sql://warehouse/orders") == ("postgres://db.internal:5432", "sales.public.orders")
    assert dataset_name("sql://warehouse?query=SELECT 1") is None


def test_operator_lineage_has_inputs_outputs_and_the_row_count(tmp_path):
    query = "sql://warehouse?query=SELECT text FROM orders"
    lineage = operator_lineage([str(tmp_path / "a.csv"), query], str(tmp_path / "out.parquet"), rows_out=7)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("file", str(tmp_path / "a.csv"))]
    [out] = lineage.outputs
    assert out.name == str(tmp_path / "out.parquet") and out.outputFacets["outputStatistics"].rowCount == 7
    assert lineage.job_facets["sql"].query == "SELECT text FROM orders"


def test_a_query_as_the_target_has_no_output_dataset(tmp_path):
    """A query is no target (check_target refuses it when the task runs), but the OpenLineage
    listener asks for lineage before that: it gets the inputs and no output, not a TypeError."""
    lineage = operator_lineage([str(tmp_path / "a.csv")], "sql://warehouse?query=SELECT 1")
    assert lineage.outputs == [] and [d.name for d in lineage.inputs] == [str(tmp_path / "a.csv")]


def test_asset_uris_follow_the_openlineage_names(tmp_path, monkeypatch):
    from airflow_quail.lineage import asset_uri

    monkeypatch.setenv("AIRFLOW_CONN_LAKE_DB", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "l.db")}))
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps({"conn_type": "postgres", "host": "db.internal",
                                                             "login": "u", "schema": "sales"}))
    assert asset_uri(str(tmp_path / "a.parquet")) == f"file://{tmp_path / 'a.parquet'}"
    assert asset_uri("s3://aws_default@bucket/in/a.parquet") == "s3://bucket/in/a.parquet"
    assert asset_uri("sql://lake_db/jokes") == f"sqlite://{tmp_path / 'l.db'}/jokes"
    assert asset_uri("sql://warehouse/orders") == "postgres://db.internal:5432/sales/public/orders"
    for none in ("sql://warehouse?query=SELECT 1", "sql://no_such_conn/t", str(tmp_path / "{{ ds }}.parquet")):
        assert asset_uri(none) is None, none


def test_targets_are_outlets_and_sources_inlets_unless_the_dag_says_otherwise(tmp_path, monkeypatch):
    from airflow.sdk import Asset

    from airflow_quail.operators import LLMFilterOperator, LLMJoinOperator

    monkeypatch.setenv("AIRFLOW_CONN_LAKE_DB", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "l.db")}))
    join = LLMJoinOperator(task_id="j", left="sql://lake_db/jokes", right=str(tmp_path / "r.csv"), left_column="a",
                           right_column="b", condition="c", target=str(tmp_path / "out.parquet"))
    assert join.outlets == [Asset(f"file://{tmp_path / 'out.parquet'}")]
    assert join.inlets == [Asset(f"sqlite://{tmp_path / 'l.db'}/jokes"), Asset(f"file://{tmp_path / 'r.csv'}")]
    own = LLMFilterOperator(task_id="f", source=str(tmp_path / "a.csv"), text_column="t", predicates=["q?"],
                            target="sql://lake_db/kept", outlets=[Asset("s3://elsewhere/kept")], inlets=[])
    assert own.outlets == [Asset("s3://elsewhere/kept")] and own.inlets == []
    templated = LLMFilterOperator(task_id="g", source="sql://lake_db?query=SELECT t FROM x", text_column="t",
                                  predicates=["q?"], target=str(tmp_path / "{{ ds }}.parquet"))
    assert templated.outlets == [] and templated.inlets == []
