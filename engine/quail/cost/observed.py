"""The stats store: selectivities observed in earlier runs, refining the planner's estimates.

A small JSON file under $QUAIL_HOME keyed by the filter's fingerprint. The estimate is Laplace's
rule of succession, (passed + 1) / (rows + 2): 0.5 before any observation. A file that is not such
a mapping (garbage, a cut-off write, another shape) is set aside beside it, with a warning, and the
run goes on with an empty store.
"""

import json
import logging
import time
from pathlib import Path

from quail.atomic import write_text_atomically
from quail.paths import home

log = logging.getLogger(__name__)


def _counts(value: object) -> bool:
    """{"rows": R, "passed": P}, whole numbers with 0 <= P <= R."""
    if not isinstance(value, dict) or set(value) != {"rows", "passed"}:
        return False
    rows, passed = value["rows"], value["passed"]
    return all(type(n) is int for n in (rows, passed)) and 0 <= passed <= rows


class SelectivityStore:
    def __init__(self, path: Path | None = None):
        self.path = path or home() / "selectivity.json"

    def _read(self) -> dict[str, dict[str, int]]:
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            log.warning("the selectivity store %s cannot be read (%s): planning without it", self.path, e.strerror)
            return {}
        try:
            data = json.loads(text)
        except ValueError as e:  # not JSON, not UTF-8, or cut off
            return self._set_aside(f"not JSON: {e}")
        if not isinstance(data, dict) or not all(_counts(v) for v in data.values()):
            return self._set_aside("not a mapping of each filter to its rows and passed rows")
        return data

    def _set_aside(self, why: str) -> dict:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d%H%M%S')}")
        try:
            self.path.replace(aside)
        except OSError as e:
            log.warning("the selectivity store %s is damaged (%s) and cannot be set aside (%s): planning without it",
                        self.path, why, e.strerror)
        else:
            log.warning("the selectivity store %s is damaged (%s): set aside as %s and started anew", self.path, why,
                        aside.name)
        return {}

    def estimates(self) -> dict[str, float]:
        return {k: (v["passed"] + 1) / (v["rows"] + 2) for k, v in self._read().items()}

    def record(self, fingerprint: str, rows: int, passed: int) -> None:
        data = self._read()
        seen = data.setdefault(fingerprint, {"rows": 0, "passed": 0})
        seen["rows"] += rows
        seen["passed"] += passed
        write_text_atomically(self.path, json.dumps(data, indent=1, sort_keys=True))
