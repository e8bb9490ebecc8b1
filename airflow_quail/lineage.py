"""Lineage for the operators: their sources and targets as OpenLineage datasets, named by the
OpenLineage naming conventions, with the output's row count (the OpenLineage provider calls the
operators' get_openlineage_facets_on_start/on_complete); and as Airflow Assets with URIs made from
the same names, the target an outlet and the sources inlets, so a DAG can be scheduled on a Quail
output."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowException

from airflow_quail.io import object_path, parse_sql, sql_engine
from quail.errors import QuailError

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Asset

_DEFAULT_SCHEMA = {"postgresql": "public"}
_DEFAULT_PORT = {"postgresql": 5432, "mysql": 3306}


def dataset_name(uri: str) -> tuple[str, str] | None:
    """(namespace, name) of a source or target; None for a SQL query, which is not a dataset."""
    where = parse_sql(uri)
    if where is not None:
        if where.table is None:
            return None
        url = sql_engine(where.conn_id).url  # no connection is opened
        backend = url.get_backend_name()
        if backend == "sqlite":
            return f"sqlite://{Path(url.database or '').resolve()}", where.table
        scheme = "postgres" if backend == "postgresql" else backend
        schema = _DEFAULT_SCHEMA.get(backend)
        name = ".".join(p for p in (url.database, schema, where.table) if p)
        return f"{scheme}://{url.host}:{url.port or _DEFAULT_PORT.get(backend, '')}", name
    path = object_path(uri, readable=False)
    if path is None or path.protocol == "file":
        return "file", str(Path(path.path if path is not None else uri).resolve())
    return path.namespace, path.key


def asset_uri(uri: str) -> str | None:
    """The Asset URI of a source or target: sqlite:///path/to.db/table,
    postgres://host:port/database/schema/table, file:///path, s3://bucket/key. None for a SQL
    query, a templated one (known only when the task runs) or a connection not defined here."""
    if "{{" in uri or "{%" in uri:
        return None
    try:
        named = dataset_name(uri)
    except (QuailError, AirflowException):
        return None
    if named is None:
        return None
    namespace, name = named
    if namespace == "file":
        return f"file://{name}"
    if namespace.startswith("postgres://"):
        return f"{namespace}/{name.replace('.', '/')}"  # the provider's form: database/schema/table
    return f"{namespace}/{name}"


def quail_asset(uri: str) -> "Asset":
    """The Asset a Quail operator declares for `uri` (a target or source), for `schedule=[...]`."""
    from airflow.sdk import Asset

    found = asset_uri(uri)
    if found is None:
        raise QuailError(f"{uri} has no Asset: a SQL query, a templated path or an undefined connection")
    return Asset(found)


def operator_lineage(sources: list[str], target: str, rows_out: int | None = None) -> "OperatorLineage":
    from airflow.providers.common.compat.openlineage.facet import (
        InputDataset,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SQLJobFacet,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    inputs, queries = [], []
    for source in sources:
        named = dataset_name(source)
        if named is not None:
            inputs.append(InputDataset(*named))
        elif (where := parse_sql(source)) is not None and where.query is not None:
            queries.append(where.query)
    stats: dict[str, Any] = {} if rows_out is None else {
        "outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows_out)}
    output = dataset_name(target)  # None for a SQL query, which is not a dataset
    outputs = [] if output is None else [OutputDataset(*output, outputFacets=stats)]
    return OperatorLineage(inputs=inputs, outputs=outputs,
                           job_facets={"sql": SQLJobFacet(query=";\n".join(queries))} if queries else {})
