"""A model's identity for stored answers: the sha256 of the bytes it loads, hashed on a thread while
they load, never taken from a cache by path, size or modification time (`cp -p`, `rsync -a` and
`tar x` keep those for other bytes). A file's digest is its plain sha256, so an embedded model's is
the one the registry pins; a directory's is a digest of its files' names and digests.

The files' stat fingerprint (device, inode, size, mtime, ctime: a write changes the ctime, which no
unprivileged user can set) tells a long-lived worker that its files changed since it loaded them."""

import hashlib
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


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def files_digest(path: Path, files: list[Path]) -> str:
    if not path.is_dir():
        return _sha256(path)
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\x1f{_sha256(f)}\n".encode())
    return h.hexdigest()


def digest_while(path: Path, files: list[Path]) -> Future:
    """The files' digest, computed on a thread of its own (hashlib releases the GIL) while the
    caller loads them."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="quail-digest")
    try:
        return pool.submit(files_digest, path, files)
    finally:
        pool.shutdown(wait=False)
