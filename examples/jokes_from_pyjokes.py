"""Writes examples/jokes.csv: the English "neutral" jokes of pyjokes 0.8.3, a package on PyPI.

    python examples/jokes_from_pyjokes.py   # needs pip and the package index, nothing else

pyjokes is BSD-3-Clause; its English jokes started from a Stack Overflow thread under CC BY-SA 3.0
(see examples/README.md). A wheel is a zip that Python imports from, so nothing is installed.
"""

import csv
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.8.3"
OUT = Path(__file__).with_name("jokes.csv")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", f"pyjokes=={VERSION}", "--no-deps", "-d", tmp,
                        "-q"], check=True)
        [wheel] = Path(tmp).glob("pyjokes-*.whl")
        sys.path.insert(0, str(wheel))
        from pyjokes.jokes_en import neutral
    with OUT.open("w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(["id", "joke"])
        w.writerows(enumerate(neutral))
    print(f"{OUT}: {len(neutral)} jokes from pyjokes {VERSION}")


if __name__ == "__main__":
    main()
