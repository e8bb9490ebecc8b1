"""The window driver both front ends share: windows in order, a row limit counted across them, the
accounting added up. Its step here is a plain function, as a front end's is; the front ends' own
steps run in tests/cli and tests/airflow_quail."""

import pyarrow as pa
import pytest

from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.pipeline.windows import WindowDone, check_window_rows, drive
from quail.planner.predict import Prediction
from quail.specs import OperatorSpec

SPEC = OperatorSpec("f", "filter", ("t",), ("text",), ("Q?",), limit=5)


def _windows(sizes: list[int], null_every: int = 0):
    first = 0
    for n in sizes:
        texts = [None if null_every and (first + i + 1) % null_every == 0 else f"row {first + i}" for i in range(n)]
        yield first, pa.table({"text": pa.array(texts, pa.string())})
        first += n


def test_a_limit_is_counted_across_windows_and_stops_the_driver():
    seen = []

    def step(w):
        seen.append((w.k, w.offset, w.spec.limit, w.last, w.inputs[0][1]))
        return WindowDone(rows_out=2, counted=2, stats=Stats(tokens_naive=10, tokens_computed=10),
                          predicted=Prediction(10.0, 10.0))

    done = drive(SPEC, _windows([3, 3, 3, 3]), "t", [], step)
    assert [(k, offset, limit, last) for k, offset, limit, last, _ in seen] == \
        [(0, 0, 5, False), (1, 3, 3, False), (2, 6, 1, False)]  # 2 + 2 + 2 >= 5: the fourth is never read
    assert seen[1][4] == [3, 4, 5]  # row numbers are the table's
    assert (done.windows, done.rows_in, done.rows_out) == (3, 9, 6)
    assert done.stats.tokens_computed == 30 and done.predicted.tokens_computed == 30.0


def test_skipped_rows_are_counted_and_the_last_window_is_known():
    lasts = []

    def step(w):
        lasts.append(w.last)
        return WindowDone(len(w.inputs[0][0]), 0, Stats(), Prediction())

    spec = OperatorSpec("f", "filter", ("t",), ("text",), ("Q?",))
    done = drive(spec, _windows([4, 4, 2], null_every=3), "t", [], step, on_null="skip")
    assert lasts == [False, False, True]
    assert done.stats.rows_skipped == 3 and done.rows_out == 7  # rows 2, 5 and 8


def test_a_null_names_its_row_when_it_fails():
    with pytest.raises(QuailError, match="row 2 of column"):  # the second window's first row
        drive(OperatorSpec("f", "filter", ("t",), ("text",), ("Q?",)), _windows([2, 2], null_every=3), "t", [],
              lambda w: WindowDone(0, 0, Stats(), Prediction()))


@pytest.mark.parametrize("rows", [0, -1, 2**31, 2**63])
def test_window_rows_out_of_range_are_refused(rows):
    with pytest.raises(QuailError, match="window_rows must be between 1 and") as e:
        check_window_rows(rows)
    assert e.value.parameter == "window_rows"


def test_a_budget_stops_the_driver_at_the_window_that_passes_it():
    seen = []

    def step(w):
        seen.append(w.k)
        return WindowDone(3, 0, Stats(tokens_naive=40, tokens_computed=40), Prediction())

    spec = OperatorSpec("f", "filter", ("t",), ("text",), ("Q?",))
    assert drive(spec, _windows([3, 3, 3]), "t", [], step, max_tokens=120).stats.tokens_computed == 120
    with pytest.raises(QuailError, match=r"'f' passed its budget: 80 tokens computed by window 1 \(rows 3-5\), "
                                         r"over max_tokens 79; it stopped there"):
        drive(spec, _windows([3, 3, 3]), "t", [], step, max_tokens=79)
    assert seen[3:] == [0, 1]  # the third window was never computed


def test_a_plan_that_predicts_more_than_the_budget_is_refused():
    from quail.pipeline.windows import check_budget

    check_budget("f", Prediction(100.0, 50.0), 50)
    check_budget("f", Prediction(100.0, 50.0), None)
    with pytest.raises(QuailError, match=r"'f': the plan predicts 51 computed tokens, over its budget "
                                         r"\(max_tokens 50\); nothing was computed") as e:
        check_budget("f", Prediction(100.0, 51.0), 50, "max_tokens")
    assert e.value.parameter == "max_tokens"  # the run's budget: the CLI names --max-tokens
    with pytest.raises(QuailError) as e:
        check_budget("f", Prediction(100.0, 51.0), 50)
    assert e.value.parameter is None  # the operator's own, set in its pipeline file
