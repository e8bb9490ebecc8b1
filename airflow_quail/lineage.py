"""OpenLineage for the operators: their sources and targets as datasets, named by the OpenLineage
naming conventions, and the output's row count. Used where the OpenLineage provider is installed:
it calls the operators' get_openlineage_facets_on_start/on_complete."""

from pathlib import Path

from airflow_quail.io import object_path, parse_sql, sql_engine

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


def operator_lineage(sources: list[str], target: str, rows_out: int | None = None):
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
        if named is None:
            queries.append(parse_sql(source).query)
        else:
            inputs.append(InputDataset(*named))
    stats = {} if rows_out is None else {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows_out)}
    return OperatorLineage(inputs=inputs, outputs=[OutputDataset(*dataset_name(target), outputFacets=stats)],
                           job_facets={"sql": SQLJobFacet(query=";\n".join(queries))} if queries else {})
