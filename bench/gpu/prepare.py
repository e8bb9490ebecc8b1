"""Writes the GPU check's carried files, on the CPU machine (it has the embedded model and gguf):
SmolLM2's tokenizer.json (3.5 MB), W1's documents and predicates (0.24 MB), and wheels/ (5.9 MB:
what the engine imports beyond the GPU machine's torch stack, for its Python). A preparation step,
not a measurement: it writes no results.

    python -m bench gpu prepare [.gpu] [--docs 200]
    PYTHONPATH=engine python bench/gpu_w1.py --prepare .gpu     # the same, at its old path
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

# What the engine imports beyond the GPU machine's torch/transformers stack, as wheels for its
# Python; bench/gpu/check.sh unpacks those that do not import there.
GPU_WHEELS = ("pydantic", "pydantic_core", "annotated-types", "typing-inspection", "llguidance",
              "SQLAlchemy")  # the answer store of the table run's `quail pipeline`
GPU_PYTHON = "3.12"


def prepare(folder: str, n: int = 200) -> None:
    """Writes what the GPU machine needs into `folder`, carried there."""
    from bench.common.documents import PREDICATES, reference_documents
    from quail.model.loader import load_model

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = load_model("smollm2-135m", "float32").tokenizer
    tokenizer._tk.save(str(out / "tokenizer.json"))
    texts = reference_documents(n, tokenizer)
    (out / "documents.json").write_text(json.dumps({"python": sys.version.split()[0], "tokenizer": "smollm2-135m",
                                                    "predicates": PREDICATES, "documents": texts}, indent=0))
    for f in ("tokenizer.json", "documents.json"):
        print(f"{out / f}: {(out / f).stat().st_size:,} bytes")
    download_wheels(out / "wheels")


def download_wheels(folder: Path) -> None:
    """Downloads GPU_WHEELS at the versions installed here, built for the GPU machine's Python."""
    from importlib.metadata import version

    pins = [f"{name}=={version(name)}" for name in GPU_WHEELS]
    platforms = [arg for tag in ("2014", "_2_17", "_2_28", "_2_31") for arg in ("--platform", f"manylinux{tag}_x86_64")]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", GPU_PYTHON, "--implementation", "cp",
                    "--abi", "cp" + GPU_PYTHON.replace(".", ""), "--abi", "abi3", "--abi", "none",
                    *platforms, "--dest", str(folder), *pins], check=True)
    for wheel in sorted(folder.glob("*.whl")):
        print(f"{wheel}: {wheel.stat().st_size:,} bytes")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench gpu prepare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", help="the folder to write (default .gpu)")
    ap.add_argument("--prepare", help=argparse.SUPPRESS)  # the folder, in bench/gpu_w1.py's old spelling
    ap.add_argument("--docs", type=int, default=200)
    args = ap.parse_args(argv)
    prepare(args.prepare or args.folder or ".gpu", args.docs)
