"""The files a command reads besides its tables, which none of its outputs may be (the tables are the
runner's own, pipeline/runner.py `check_outputs`): the pipeline file, every file the loader opens
for each model, an embedded one's inside its package too, the answer store's files, the file
that names the store and its signing key, and Quail's records of what earlier runs observed."""

import argparse
import os
from pathlib import Path

from quail.cost.observed import SelectivityCounts, WrittenCounts
from quail.model.identity import model_files
from quail.model.registry import EMBEDDED, cache_dir, package_dir
from quail.paths import home
from quail.pipeline.config import Pipeline
from quail.store import store_location
from quail.store.signing import KEY_FILE

NEVER_WRITTEN = "which the run never writes"


def files_read(args: argparse.Namespace, pipeline: Pipeline) -> dict[str, str]:
    """Each file the run reads -> what it is."""
    read = {str(s.path): f"Quail's {s.what}, which only Quail writes" for s in (SelectivityCounts(), WrittenCounts())}
    if args.command == "pipeline":
        read[args.pipeline] = f"the pipeline file, {NEVER_WRITTEN}"
    for model in [pipeline.model] + [s.cascade.model for s in pipeline.specs if s.cascade is not None]:
        read |= {str(f): f"a file of the model {model}, {NEVER_WRITTEN}" for f in _model_files(model)}
    return read | _store_files(args)


def _model_files(model: str) -> list[Path]:
    if model in EMBEDDED:
        return _embedded_files(model)
    return model_files(Path(model)) if Path(model).exists() else []


def _embedded_files(name: str) -> list[Path]:
    """What the loader opens for an embedded model, found without assembling a split one (model/
    registry.py `embedded_path`): the GGUF in its package, or the parts and the file made of them."""
    model = EMBEDDED[name]
    folders = [d for d in map(package_dir, model.packages) if d is not None]
    if model.file is not None:
        return [d / model.file for d in folders]
    return [cache_dir() / f"{name}.gguf"] + [p for d in folders for p in sorted((d / "data").glob("*.bin"))]


def _store_files(args: argparse.Namespace) -> dict[str, str]:
    """The file that names the answer store, and the store's own: a SQLite database with its
    journals, or the password file libpq reads for a database URL."""
    named = args.answer_store_file or (None if args.answer_store else os.environ.get("QUAIL_ANSWER_STORE_FILE"))
    flag = "--answer-store-file" if args.answer_store_file else "QUAIL_ANSWER_STORE_FILE"
    read = {named: f"the file that names the answer store ({flag}), {NEVER_WRITTEN}"} if named else {}
    key = os.environ.get("QUAIL_ANSWER_STORE_KEY_FILE") or str(home() / KEY_FILE)
    read[key] = f"the key the answer store's answers are signed with, {NEVER_WRITTEN}"
    if named and args.no_answer_store:
        return read  # not opened, so whatever it names is not read: its mode and text are not checked either
    location = store_location(args.answer_store, args.answer_store_file)
    if "://" in location:
        password = os.environ.get("PGPASSFILE") or str(Path.home() / ".pgpass")
        return read | {password: f"the password file of the answer store's database, {NEVER_WRITTEN}"}
    database = {location, str(Path(location).resolve())}  # a link's journals lie beside its target
    return read | {f"{d}{suffix}": "a file of the answer store, which only the store writes"
                   for d in database for suffix in ("", "-wal", "-shm", "-journal")}
