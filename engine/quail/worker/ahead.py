"""Computing a DAG's consumers ahead. A job carries its DAG's plan, so the worker knows which later
tasks read this one's output. Right after a window of the producer, while that window's documents'
KV is in the arena, it computes the answers of each such consumer on the rows the window passes and
keeps them in the answer store; the consumer's task, when it runs, finds them by content. A
consumer whose input or spec has changed simply misses: computing ahead can make work useless,
never wrong.

Computed ahead: a filter or a classify that surely runs after the producer (OperatorPlan.certain:
no branch above it and trigger rule all_success, or the DAG said so), whose first input is the
producer's output read on the same text column, with no row limit, no cascade, and no template
left in what it asks (the plan made at parse time holds the templates, not the run's values). Not
a join: its right side is another task's input, read only when it runs."""

import pyarrow as pa

from quail.kinds import kind_of
from quail.planner.plan import Plan
from quail.runtime import runtime_of
from quail.specs import OperatorSpec


def consumers_ahead(plan: Plan, spec: OperatorSpec) -> list[OperatorSpec]:
    if not kind_of(spec.kind).keeps_rows:
        return []
    return [c for c in plan.specs if c.name != spec.name and c.inputs[0] == spec.name and plan[c.name].certain
            and c.columns[0] == spec.columns[0] and kind_of(c.kind).arity == 1 and c.limit is None
            and c.cascade is None and "{{" not in repr((c.columns, c.questions, c.labels, c.descriptions))]


def consumer_input(spec: OperatorSpec, results: pa.Table, inputs: list[tuple[list[str], list[int]]]) \
        -> tuple[list[str], list[int]]:
    """The texts (and row numbers) of the producer's window that its output holds."""
    texts = dict(zip(inputs[0][1], inputs[0][0]))
    kept = runtime_of(spec.kind).output_rows(spec, results)
    return [texts[r] for r in kept if r in texts], kept
