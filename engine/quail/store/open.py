"""Which answer store a front end opens: the embedded SQLite file (the default), or a PostgreSQL
database that a pool of workers shares, named by --answer-store or $QUAIL_ANSWER_STORE as a path
or a SQLAlchemy URL (`postgresql+psycopg://quail@db:5432/quail`)."""

import os
from pathlib import Path

from quail.errors import QuailError
from quail.store.base import Store
from quail.store.postgres import PostgresStore, postgres_url
from quail.store.sqlite import SqliteStore, default_path
from quail.trust import secret_file


def store_location(given: str | None = None, given_file: str | None = None) -> str:
    """--answer-store, else the file --answer-store-file or $QUAIL_ANSWER_STORE_FILE names (a URL
    with its password, readable by its owner alone: a Kubernetes Secret's), else $QUAIL_ANSWER_STORE,
    else answers.sqlite in Quail's home."""
    if given:
        return given
    if path := given_file or os.environ.get("QUAIL_ANSWER_STORE_FILE"):
        return secret_file(path, "answer_store_file") if given_file else \
            secret_file(path, "QUAIL_ANSWER_STORE_FILE", variable=True)
    return os.environ.get("QUAIL_ANSWER_STORE") or str(default_path())


def open_store(given: str | None = None, given_file: str | None = None, pool_size: int = 4) -> Store:
    """pool_size: a database's connections, as many as the front end's job threads."""
    location = store_location(given, given_file)
    url = postgres_url(location)
    if url is None and "/" not in location and not location.endswith((".sqlite", ".db")):
        # a bare word (`--answer-store garbage`) is a mistake more often than a file meant in this folder
        raise QuailError("answer store: give a path with a folder (./answers.sqlite) or ending in .sqlite, or a "
                         "postgresql+psycopg:// URL")
    return SqliteStore(Path(location).absolute()) if url is None else PostgresStore(url, pool_size=pool_size)
