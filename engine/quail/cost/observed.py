"""The stats store: selectivities observed in earlier runs, refining the planner's estimates.

A small JSON file under $QUAIL_HOME keyed by the filter's fingerprint. The estimate is Laplace's
rule of succession, (passed + 1) / (rows + 2): 0.5 before any observation.
"""

import json
from pathlib import Path

from quail.atomic import write_text_atomically
from quail.paths import home


class SelectivityStore:
    def __init__(self, path: Path | None = None):
        self.path = path or home() / "selectivity.json"

    def _read(self) -> dict[str, dict[str, int]]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def estimates(self) -> dict[str, float]:
        return {k: (v["passed"] + 1) / (v["rows"] + 2) for k, v in self._read().items()}

    def record(self, fingerprint: str, rows: int, passed: int) -> None:
        data = self._read()
        seen = data.setdefault(fingerprint, {"rows": 0, "passed": 0})
        seen["rows"] += rows
        seen["passed"] += passed
        write_text_atomically(self.path, json.dumps(data, indent=1, sort_keys=True))
