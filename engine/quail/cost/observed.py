"""The observed counts: what earlier runs observed, refining the planner's estimates.

Small JSON files under $QUAIL_HOME of counts per key. `selectivity.json`, keyed by a filter's
fingerprint: rows asked and passed; the estimate is Laplace's rule of succession, (passed + 1) /
(rows + 2): 0.5 before any observation. `written.json`, keyed by an extract's field or a map's
instruction (kinds/extract.py `field_keys`): rows and tokens written; the estimate is their mean.
A file that is not such a mapping (garbage, a cut-off write, another shape) is set aside beside it,
with a warning, and the run goes on with no counts.
"""

import json
import logging
import time
from pathlib import Path

from quail.atomic import write_text_atomically
from quail.paths import home

log = logging.getLogger(__name__)


class _Counts:
    """Two counts per key in a JSON file, added to by each run that observes them."""

    file = ""
    fields: tuple[str, str] = ("", "")
    what = ""

    def __init__(self, path: Path | None = None):
        self.path = path or home() / self.file

    def _valid(self, value: object) -> bool:
        """{FIRST: R, SECOND: S}, whole numbers at least 0."""
        return isinstance(value, dict) and set(value) == set(self.fields) and \
            all(type(n) is int and n >= 0 for n in value.values())

    def _read(self) -> dict[str, dict[str, int]]:
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            log.warning("the %s %s cannot be read (%s): planning without it", self.what, self.path, e.strerror)
            return {}
        try:
            data = json.loads(text)
        except ValueError as e:  # not JSON, not UTF-8, or cut off
            return self._set_aside(f"not JSON: {e}")
        if not isinstance(data, dict) or not all(self._valid(v) for v in data.values()):
            return self._set_aside(f"not a mapping of each key to its {' and '.join(self.fields)}")
        return data

    def _set_aside(self, why: str) -> dict:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d%H%M%S')}")
        try:
            self.path.replace(aside)
        except OSError as e:
            log.warning("the %s %s is damaged (%s) and cannot be set aside (%s): planning without it", self.what,
                        self.path, why, e.strerror)
        else:
            log.warning("the %s %s is damaged (%s): set aside as %s and started anew", self.what, self.path, why,
                        aside.name)
        return {}

    def record(self, counts: dict[str, tuple[int, int]]) -> None:
        """Adds each key's counts, in one write."""
        data = self._read()
        for key, (rows, tokens) in counts.items():
            seen = data.setdefault(key, dict.fromkeys(self.fields, 0))
            seen[self.fields[0]] += rows
            seen[self.fields[1]] += tokens
        write_text_atomically(self.path, json.dumps(data, indent=1, sort_keys=True))


class SelectivityCounts(_Counts):
    file, fields, what = "selectivity.json", ("rows", "passed"), "selectivity store"

    def _valid(self, value: object) -> bool:
        return super()._valid(value) and isinstance(value, dict) and value["passed"] <= value["rows"]

    def estimates(self) -> dict[str, float]:
        return {k: (v["passed"] + 1) / (v["rows"] + 2) for k, v in self._read().items()}


class WrittenCounts(_Counts):
    file, fields, what = "written.json", ("rows", "tokens"), "written-token store"

    def means(self) -> dict[str, float]:
        """Each key's mean tokens written a row."""
        return {k: v["tokens"] / v["rows"] for k, v in self._read().items() if v["rows"]}
