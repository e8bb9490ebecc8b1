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
