"""runtime/observed.py: an operator's windows add up into one record of the counts, the same for
the CLI's runner and the worker; a row limit's windows are no sample, and nothing is recorded of
an operator that observed nothing."""

import dataclasses

import pyarrow as pa

from quail.cost.observed import SelectivityCounts, WrittenCounts
from quail.runtime.observed import Observed
from quail.specs import FieldSpec, OperatorSpec

FILTER = OperatorSpec("f", "filter", ("t",), ("text",), ("Sport?",))
EXTRACT = OperatorSpec("e", "extract", ("t",), ("text",), ("Fill in.",), fields=(FieldSpec("city", "str"),))


def test_windows_add_up_into_one_record(tmp_path):
    selectivity, written = SelectivityCounts(tmp_path / "s.json"), WrittenCounts(tmp_path / "w.json")
    seen = Observed(FILTER, lambda texts: [t.split() for t in texts])
    seen.add(FILTER, pa.table({"row": [0, 1, 2], "passed": [True, False, True]}))
    seen.add(FILTER, pa.table({"row": [3], "passed": [False]}))
    seen.record(selectivity, written)
    assert selectivity.estimates() == {FILTER.fingerprint(): (2 + 1) / (4 + 2)}
    assert written.means() == {}


def test_a_limit_observes_nothing_and_an_extract_its_tokens(tmp_path):
    selectivity, written = SelectivityCounts(tmp_path / "s.json"), WrittenCounts(tmp_path / "w.json")
    limited = dataclasses.replace(FILTER, limit=1)
    seen = Observed(limited, lambda texts: [t.split() for t in texts])
    seen.add(limited, pa.table({"row": [0, 1], "passed": [True, True]}))
    seen.record(selectivity, written)
    assert not selectivity.path.exists() and not written.path.exists()
    wrote = Observed(EXTRACT, lambda texts: [t.split() for t in texts])
    wrote.add(EXTRACT, pa.table({"row": [0, 1], "city": ["Leeds", None], "truncated": [False, True]}))
    wrote.record(selectivity, written)
    assert list(written.means().values()) == [2.0]  # '"city": "Leeds"' is two words; the cut row is no sample
