"""Human-readable plans and accounting: `quail explain` and the summary after a run."""

from typing import TYPE_CHECKING

from quail.cost.model import CostModel
from quail.executor.stats import Stats
from quail.planner.guarantee import Guarantee
from quail.planner.plan import Plan
from quail.planner.predict import Prediction
from quail.planner.recall import describe as describe_blocking

if TYPE_CHECKING:
    from quail.executor.memory import ArenaSizing


def _accounting(p: Prediction | Stats) -> str:
    r = p.tokens_reused
    saved = 1 - p.tokens_computed / p.tokens_naive if p.tokens_naive else 0.0
    return (f"{p.tokens_computed:,.0f} computed of {p.tokens_naive:,.0f} without reuse ({saved:.0%} saved); "
            f"reused: rewind {r['rewind']:,.0f}, sharing {r['sharing']:,.0f}, retention {r['retention']:,.0f}"
            + (f", store {r['store']:,.0f}" if r.get("store") else "")
            + _written(p))


def _written(p: Prediction | Stats) -> str:
    if not isinstance(p, Prediction):
        return f"; written {p.tokens_generated:,.0f}" if p.tokens_generated else ""
    if not p.tokens_generated_at_most:
        return ""
    if round(p.tokens_generated_expected) < round(p.tokens_generated_at_most):
        return f"; written about {p.tokens_generated_expected:,.0f} (at most {p.tokens_generated_at_most:,.0f})"
    return f"; written at most {p.tokens_generated_at_most:,.0f}"


def describe_plan(plan: Plan, predicted: dict[str, Prediction], cost: CostModel, arena_pages: int,
                  retention_capacity: int, memory: "ArenaSizing | None" = None) -> str:
    lines = [
        f"plan {plan.hash}",
        *([f"device {memory.describe()}"] if memory else []),
        f"cost model ({cost.device}): {cost.per_pass * 1e3:.2f} ms per pass + "
        f"{cost.per_token * 1e6:.1f} us per token + {cost.per_token_context * 1e9:.2f} ns per token per "
        f"context token; KV write {cost.kv_write_per_page * 1e6:.1f} us per page",
        f"arena: {arena_pages:,} pages; retention capacity {retention_capacity:,} pages "
        f"(the arena minus two forward passes)",
    ]
    for spec in plan.specs:
        op = plan[spec.name]
        lines.append(f"\n{spec.name}: {spec.kind} of {' x '.join(spec.inputs)} (column {', '.join(spec.columns)})")
        if op.selectivity is not None:
            lines.append(f"  selectivity estimate: {op.selectivity:.2f}")
        lines.append(f"  KV rewind (chain mode): {'on' if op.rewind else 'off'}")
        lines.append(f"  prefix sharing: {'on' if op.sharing else 'off'} ({op.sharing_reason})")
        if op.retain is None:
            lines.append("  retain: nothing")
        else:
            extra = f", failing rows p={op.retain.failed:.2f}" if op.retain.failed else ""
            lines.append(f"  retain document KV for {', '.join(op.retain.consumers)} "
                         f"(p={op.retain.passed:.2f}{extra}); released after {op.retain.consumers[-1]}")
        if spec.cascade is not None:
            c = spec.cascade
            band = f"in [{c.low:g}, {c.high:g}]" if c.low is not None and c.high is not None else \
                f"in a band chosen for {c.metric} >= {c.target:g} (delta {c.delta:g}) on {c.sample} rows of the " \
                f"first window"
            lines.append(f"  cascade: rows with P(yes) {band} go to {c.model}, whose share is predicted once they "
                         f"are known")
        lines.append(f"  predicted: {_accounting(predicted[spec.name])}")
    return "\n".join(lines)


def describe_run(name: str, stats: Stats, predicted: Prediction, rows_out: int, rows_in: int | None = None,
                 target: str | None = None) -> str:
    rows = f"rows out {rows_out:,}" + (f" of {rows_in:,} in" if rows_in is not None else "")
    return (
        f"{name}: {rows}" + (f", written to {target}" if target else "") + "\n"
        f"  actual:    {_accounting(stats)}\n"
        f"  predicted: {_accounting(predicted)}\n"
        f"  forward passes {stats.forward_passes}, peak pages {stats.pages_peak} of {stats.pages_total}, "
        f"{stats.seconds:.1f} s ({stats.tokens_computed / max(stats.seconds, 1e-9):,.0f} tok/s)"
        + "".join(f"\n  {model}: {m['rows']:,} rows, {m['tokens_computed']:,} tokens computed of "
                  f"{m['tokens_naive']:,}" for model, m in stats.by_model.items())
        + (f"\n  cascade band: {Guarantee.from_dict(stats.guarantee).describe()}" if stats.guarantee else "")
        + (f"\n  {describe_blocking(stats.blocking)}" if stats.blocking else "")
    )
