"""Plans a DAG's Quail operators together. An operator whose source (or left) is an upstream Quail
operator's target reads that operator's documents; that link and the DAG's order are what
retention is planned over. Pure and deterministic: the dag-processor and every task process
compute the same plan hash.

No call is needed in the DAG file: the provider's cluster policy (airflow_quail.policy) plans every
parsed DAG that holds Quail operators, and an operator outside any parse (a test, `dag.test()` on a
DAG object) plans from its DAG when it runs. `plan_quail_dag(dag)` at the end of a DAG file does
the same explicitly."""

import json
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Protocol

from quail.planner.plan import OperatorPlan, Plan, plan

if TYPE_CHECKING:
    from airflow.sdk import DAG
    from airflow.sdk.types import Operator

    from quail.specs import OperatorSpec

    class QuailOperator(Protocol):
        """What the planning reads of a Quail operator (airflow_quail.operators.base.BaseLLMOperator,
        which imports this module: named here by its shape)."""

        task_id: str
        target: str
        ahead: bool | None

        def spec(self) -> OperatorSpec: ...


def is_quail(cls: object) -> bool:
    """A Quail operator class: one whose rendered fields carry its plan entry (`quail_plan`). Known
    by that, not by its base class, so that the operators import the planning and not the reverse."""
    fields = getattr(cls, "template_fields", ())  # a MappedOperator's is a property: not one
    return isinstance(cls, type) and isinstance(fields, (tuple, list)) and "quail_plan" in fields


def plan_of_dag(dag: "DAG") -> Plan | None:
    """The plan of the DAG's Quail operators, mapped ones included, or None if it has none."""
    planned: dict = {}
    for task in dag.topological_sort():  # upstream first: a mapped task reads its producers' plans
        if (op := _planned(task, planned)) is not None:
            planned[task.task_id] = op
    if not planned:
        return None
    ops = list(planned.values())
    producer = {op.target: op.task_id for op in ops}
    specs = []
    for op in ops:
        spec = op.spec()
        linked = tuple(producer.get(i, i) if producer.get(i) != op.task_id else i for i in spec.inputs)
        specs.append(replace(spec, inputs=linked))
    return plan(specs).uncertain({t for t, op in planned.items() if not _certain(dag.get_task(t), op)})


def _certain(task: "Operator", op: "QuailOperator") -> bool:
    """Whether the task runs whenever its producers succeed, so that computing it ahead is never
    wasted: its `ahead` says so, or else its trigger rule is all_success and no task above it can
    skip it (a branch, a short-circuit)."""
    if getattr(op, "ahead", None) is not None:
        return bool(op.ahead)
    upstream = task.get_flat_relatives(upstream=True)
    return str(task.trigger_rule) in ("all_success", "TriggerRule.ALL_SUCCESS") and \
        not any(getattr(t, "inherits_from_skipmixin", False) for t in upstream)


def _planned(task: Any, planned: dict[str, "QuailOperator"]) -> "QuailOperator | None":
    """The Quail operator a task plans as. A mapped one (`.partial(...).expand(...)`) plans as one
    operator of its partial arguments: an input expanded over a Quail operator's output (its
    manifests' targets) reads that operator's target (from `planned`, the upstream tasks' plans),
    so retention is planned from it to each mapped index; one expanded over a list plans with its
    first value. Each index computes and retains its own input, under its own origin (the map
    index)."""
    if is_quail(type(task)):
        return task
    cls = getattr(task, "operator_class", None)
    if cls is None or not is_quail(cls):
        return None
    kwargs = {k: v for k, v in task.partial_kwargs.items() if k not in ("inlets", "outlets")}
    for key, value in task.expand_input.value.items():
        upstream = [ref.task_id for ref, _ in getattr(value, "iter_references", lambda: ())()]
        target = next((planned[t].target for t in upstream if t in planned), None)
        if target is None and isinstance(value, (list, tuple)) and value:
            target = value[0]
        kwargs[key] = target if target is not None else f"<{task.task_id}: each mapped {key}>"
    try:
        return cls(task_id=task.task_id, dag=None, inlets=[], outlets=[], **kwargs)
    except TypeError:  # an expanded argument that is not a text (a list of predicates): planned alone
        return None


def plan_quail_dag(dag: "DAG") -> Plan | None:
    """Plans the DAG and stores each operator's entry, with the plan hash, in its `quail_plan`
    template field, which the UI's Rendered Templates view shows."""
    result = plan_of_dag(dag)
    if result is not None:
        planned = {s.name for s in result.specs}
        for t in dag.tasks:
            if is_quail(type(t)):
                t.quail_plan = plan_document(result.hash, result[t.task_id])  # type: ignore[union-attr]  # not mapped
            elif t.task_id in planned:  # mapped: every index gets it from the partial arguments
                t.partial_kwargs["quail_plan"] = plan_document(result.hash, result[t.task_id])  # type: ignore[union-attr]
    return result


def plan_document(plan_hash: str, entry: OperatorPlan) -> str:
    """Indented, as the Rendered Templates view shows it."""
    return json.dumps({"plan_hash": plan_hash, "operator": asdict(entry)}, sort_keys=True, indent=2)
