"""A model's identity for stored answers: the sha256 of the bytes it loads. A file's digest is its
plain sha256, so an embedded model's is the one the registry pins; a directory's is a digest of its
files' names and digests.

The files' stat fingerprint (device, inode, size, mtime, ctime: a write changes the ctime, which no
unprivileged user can set) tells a long-lived worker that its files changed since it loaded them.
The digest is computed once per file and recorded beside that fingerprint in a private folder
(`recorded_digest`): any change to a file, or another file in its place, changes the fingerprint,
and the digest is computed again. Size and modification time alone would not do: `cp -p`, `rsync -a`
and `tar x` keep those for other bytes, but none keeps an inode or a ctime."""

import hashlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

WEIGHT_FILES = ("*.safetensors", "*.gguf", "config.json", "tokenizer.json", "tokenizer_config.json")

Fingerprint = tuple[tuple[str, int, int, int, int, int], ...]


def model_files(path: Path) -> list[Path]:
    """The files a model's answers depend on: a GGUF file, or a directory's weights, config and tokenizer."""
    return sorted(p for pattern in WEIGHT_FILES for p in path.glob(pattern)) if path.is_dir() else [path]


def fingerprint(files: list[Path]) -> Fingerprint:
    """What stat says of each file; a file gone reads as all zeros."""
    out = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((str(f), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            out.append((str(f), 0, 0, 0, 0, 0))
    return tuple(out)


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def files_digest(path: Path, files: list[Path]) -> str:
    if not path.is_dir():
        return file_sha256(path)
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\x1f{file_sha256(f)}\n".encode())
    return h.hexdigest()


def digest_while(path: Path, files: list[Path]) -> Future:
    """The files' digest, computed on a thread of its own (hashlib releases the GIL) while the
    caller loads them."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="quail-digest")
    try:
        return pool.submit(files_digest, path, files)
    finally:
        pool.shutdown(wait=False)


DIGESTS = ".digests"  # their folder inside $QUAIL_CONVERTED_WEIGHTS, beside the converted models


def digests_folder() -> Path:
    """Where each model file's digest is recorded: $QUAIL_HOME/models/digests, or, where
    $QUAIL_CONVERTED_WEIGHTS names a folder that several homes share, inside it, so that a new home
    maps the converted weights without reading the model's file again."""
    from quail.paths import home
    from quail.trust import private_folder

    given = os.environ.get("QUAIL_CONVERTED_WEIGHTS", "")
    return private_folder(Path(given) / DIGESTS if given not in ("", "off") else home() / "models" / "digests")


def _record_path(path: Path) -> Path:
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return digests_folder() / f"{name}.json"


def _stats(fp: Fingerprint) -> list[list]:
    return [list(f) for f in fp]


def recorded_digest(path: Path, files: list[Path]) -> str | None:
    """The digest recorded for these files, where they are still the files it was computed from."""
    from quail.trust import owned_file

    record = _record_path(path)
    try:
        if not owned_file(record):
            return None
        d = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("fingerprint") != _stats(fingerprint(files)):
        return None
    digest = d.get("digest")
    return digest if isinstance(digest, str) and len(digest) == 64 else None


def record_digest(path: Path, fp: Fingerprint, digest: str) -> None:
    """Records `digest` as that of the files while they have the fingerprint `fp` (taken before
    they were hashed, and found again after)."""
    record = _record_path(path)
    tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"path": str(path.resolve()), "fingerprint": _stats(fp), "digest": digest}))
        os.replace(tmp, record)
    except OSError:
        tmp.unlink(missing_ok=True)


def recorded_models() -> dict[str, Path]:
    """Each digest recorded for files that are still those it was computed from, with their path.
    A record whose files changed or went is removed."""
    out = {}
    for record in sorted(digests_folder().glob("*.json")):
        try:
            path = Path(json.loads(record.read_text())["path"])
            digest = recorded_digest(path, model_files(path)) if path.exists() else None
        except (OSError, ValueError, KeyError, TypeError):
            digest = None
        if digest is None:
            record.unlink(missing_ok=True)
        else:
            out[digest] = path
    return out
