"""One operator over its first input, a window of rows at a time: the loop that `quail pipeline`
and the Airflow operator both drive. The driver reads each window's documents, keeps a row limit's
count across windows, stops once it is met, and adds up the accounting; a front end's step computes
one window (in this process, or as a worker's job) and keeps its output (a temporary file, or a
staged window). The other inputs (a join's right side) are read whole."""

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import pyarrow as pa

from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.pipeline.tables import text_column
from quail.planner.predict import Prediction
from quail.planner.recall import window_delta
from quail.runtime import runtime_of
from quail.specs import OperatorSpec


@dataclass(frozen=True)
class Window:
    """Window `k` of the first input, whose first row is row `offset` of the table."""

    k: int
    offset: int
    last: bool
    spec: OperatorSpec  # the operator's spec, its limit less the rows already counted
    tables: list[pa.Table]  # this window of the first input, then the other inputs whole
    inputs: list[tuple[list[str], list[int]]]  # per input: its texts and their row numbers

    def shaped(self, results: pa.Table, source: str) -> tuple[pa.Table, int]:
        """The window's output rows from its results, and how many of them count toward a limit."""
        run = runtime_of(self.spec.kind)
        return run.shape(self.spec, run.in_window(results, self.offset), self.tables, source), run.counted_rows(results)

    def review(self, results: pa.Table, source: str) -> pa.Table:
        """The window's rows inside a cascade's band, which the larger model answered: every input
        column, `passed` and the probabilities, whatever the output keeps, for a person to review."""
        run = runtime_of(self.spec.kind)
        whole = run.shape(replace(self.spec, keep_all=True, limit=None), run.in_window(results, self.offset),
                          self.tables, source)
        return whole.filter(whole.column("escalated"))


@dataclass
class WindowDone:
    """What a step reports of one window."""

    rows_out: int
    counted: int  # rows toward a row limit
    stats: Stats
    predicted: Prediction


@dataclass
class OperatorDone:
    """One operator's windows added up."""

    windows: int = 0
    rows_in: int = 0
    rows_out: int = 0
    stats: Stats = field(default_factory=Stats)  # the first window's, with the others merged in (it knows the arena)
    predicted: Prediction = field(default_factory=Prediction)

    def add(self, rows_in: int, done: WindowDone) -> None:
        self.windows += 1
        self.rows_in += rows_in
        self.rows_out += done.rows_out
        self.stats = done.stats if self.windows == 1 else self.stats.merge(done.stats)
        self.predicted.add(done.predicted)


class Windowed:
    """One operator's side of the window loop: its other inputs (read whole), its row limit's
    count, and its totals. A consumer in a chain (pipeline/runner.py) is fed its producer's output
    windows through one of these, as the head is fed its table's."""

    def __init__(self, spec: OperatorSpec, source: str, others: list[tuple[pa.Table, str]], on_null: str = "fail",
                 max_tokens: int | None = None):
        self.spec, self.source, self.others, self.on_null = spec, source, others, on_null
        self.max_tokens = max_tokens
        self.fixed = [text_column(t, c, name, on_null) for (t, name), c in zip(others, spec.columns[1:])]
        self.total, self.counted, self.next_row, self.k = OperatorDone(), 0, 0, 0
        self.made = 0  # windows made: the next one's number (ahead of `k`, the windows done, while several run)

    @property
    def satisfied(self) -> bool:
        """Its row limit is met: nothing more is asked."""
        return self.spec.limit is not None and self.counted >= self.spec.limit

    def window(self, table: pa.Table, last: bool, offset: int | None = None) -> Window:
        """The next window, whose rows start at `offset` of the input (by default, after the last)."""
        offset = self.next_row if offset is None else offset
        window_spec = self.spec if self.spec.limit is None else replace(self.spec, limit=self.spec.limit - self.counted)
        if window_spec.recall_target is not None or window_spec.candidates is not None:
            window_spec = replace(window_spec, recall_delta=window_delta(self.spec.recall_delta, self.made, last))
        inputs = [text_column(table, self.spec.columns[0], self.source, self.on_null, offset)] + self.fixed
        self.made += 1
        return Window(self.made - 1, offset, last, window_spec, [table] + [t for t, _ in self.others], inputs)

    @property
    def independent(self) -> bool:
        """Whether its next windows may run at once: no row limit (whose count a window's rows
        depend on) and no cascade band still to be chosen on the first window."""
        return self.spec.limit is None and (self.spec.cascade is None or self.spec.cascade.chosen)

    def done(self, window: Window, done: WindowDone) -> None:
        table = window.tables[0]
        done.stats.rows_skipped += table.num_rows - len(window.inputs[0][0])
        self.total.add(table.num_rows, done)
        self.counted += done.counted
        self.next_row, self.k = window.offset + table.num_rows, self.k + 1
        cascade = self.spec.cascade
        if done.stats.guarantee and cascade is not None and not cascade.chosen:  # the first window's band, for the rest
            g = done.stats.guarantee
            self.spec = replace(self.spec, cascade=replace(cascade, low=g["low"], high=g["high"]))
        stats = self.total.stats
        if self.max_tokens is not None and (computed := stats.tokens_computed + stats.tokens_generated) \
                > self.max_tokens:
            raise QuailError(f"operator {self.spec.name!r} passed its budget: {computed:,} tokens computed by "
                             f"window {window.k} (rows {window.offset}-{self.next_row - 1}), over max_tokens "
                             f"{self.max_tokens:,}; it stopped there and wrote no output")

    def finish(self) -> OperatorDone:
        self.total.stats.rows_skipped += sum(t.num_rows - len(x) for (t, _), (x, _) in zip(self.others, self.fixed))
        return self.total


def drive(spec: OperatorSpec, windows: Iterator[tuple[int, pa.Table]], source: str,
          others: list[tuple[pa.Table, str]], step: Callable[[Window], WindowDone], on_null: str = "fail",
          after: Callable[[Window, WindowDone, OperatorDone], None] = lambda *_: None,
          max_tokens: int | None = None, parallel: int = 1) -> OperatorDone:
    """Runs `step` on each window of the first input (`windows`, read from `source`), with `others`
    (table, name) read whole; `after` sees each window once it is done, in order. Stops with an
    error at the window where the tokens computed pass `max_tokens`. `parallel`: how many windows
    may be stepped at once (each on its own thread: a pool's workers), where their rows do not
    depend on each other; at most that many windows are read ahead, so memory stays bounded."""
    op = Windowed(spec, source, others, on_null, max_tokens)
    ahead: tuple[int, pa.Table] | None = next(windows)
    with ThreadPoolExecutor(max(parallel, 1), thread_name_prefix="quail-window") as pool:
        running: deque[tuple[Window, Future]] = deque()
        while ahead is not None or running:
            while ahead is not None and (not running or op.independent and len(running) < parallel):
                (offset, table), ahead = ahead, next(windows, None)
                window = op.window(table, ahead is None, offset)
                running.append((window, pool.submit(step, window)))
            window, future = running.popleft()
            try:
                done = future.result()
                op.done(window, done)
            except BaseException:
                for _, f in running:
                    f.cancel()
                raise
            after(window, done, op.total)
            if op.satisfied:
                break
    return op.finish()


def check_count(value: object, what: str) -> int | None:
    """A count as a setting gives it (a budget of tokens, a number of workers; an operator's, a
    pipeline's, a connection's): none, or a whole number above 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise QuailError(f"{what} must be a whole number above 0, got {value!r}")
    return value


def check_budget(name: str, predicted: Prediction, max_tokens: int | None, parameter: str | None = None) -> None:
    """Refuses, before anything is computed, an operator whose plan predicts more computed tokens
    than its budget: prompt tokens, and the most an extract or a map may write. parameter:
    "max_tokens" where the budget is the run's parameter, None where it is the operator's own."""
    if max_tokens is not None and (most := predicted.tokens_computed + predicted.tokens_generated_at_most) > max_tokens:
        written = f" (with at most {round(predicted.tokens_generated_at_most):,} written)" \
            if predicted.tokens_generated_at_most else ""
        raise QuailError(f"operator {name!r}: the plan predicts {round(most):,} computed tokens{written}, "
                         f"over its budget (max_tokens {max_tokens:,}); nothing was computed", parameter=parameter)


def check_window_rows(rows: int) -> int:
    if not 1 <= rows <= 2**31 - 1:
        raise QuailError(f"window_rows must be between 1 and {2**31 - 1}, got {rows}", parameter="window_rows")
    return rows
