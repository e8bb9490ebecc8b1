"""bench/ is tested by its own tests (bench/tests: the metrics, the labelled sets, the rule behind
the default model, and that every benchmark starts), run here in a process of their own: nothing
in tests/ imports bench/, and bench/ imports nothing from tests/."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # imports every benchmark, torch and transformers with them
def test_the_benchmarks_own_tests_pass():
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "bench/tests"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_nothing_in_tests_imports_bench_and_bench_imports_nothing_from_tests():
    def imports(folder: str, name: str) -> list[str]:
        """Import statements of `name`, and the two ways round them (a module loaded from a file, or a
        folder put on sys.path). Data files may be read: tests read the labelled sets in its data/."""
        return [f"{p.relative_to(ROOT)}: {line.strip()}" for p in (ROOT / folder).rglob("*.py")
                for line in p.read_text().splitlines()
                if line.lstrip().startswith((f"import {name}", f"from {name}"))
                or (name in line.lower() and ("spec_from_file_location" in line or "sys.path" in line))]

    assert not imports("tests", "bench") and not imports("bench", "tests")
