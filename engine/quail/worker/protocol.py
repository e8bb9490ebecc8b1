"""What travels between operators and the worker over Arrow Flight: JSON commands and Arrow
tables, never pickle.

submit (do_put): the descriptor's command is JSON {origin, spec, operator_plan, reuse, window,
plan, replaces, predict_only} (predict_only: the job's prediction, nothing computed):
operator_plan is the operator's entry, plan the whole plan it belongs to, from which the worker predicts
the job's accounting (predicted vs actual). The table has one row per document: input (0, or 1 for
a join's right side), row (the input row number), text.
The worker answers with JSON {job, attached} in the put's metadata.

A job is matched by its origin *and* its content (`content_digest`): the spec, the plan entry and
the plan, the reuse switches, the worker's model and the documents. A retry with the same content
re-attaches; the same origin with other content (a cleared task whose input changed, or someone
else's submission for a predictable run id) is a new job, beside the earlier one. It cancels the
earlier one only if it names it in `replaces`: only its submitter knows its id.
"""

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Annotated

import pyarrow as pa
from pydantic import AliasChoices, Field, TypeAdapter, ValidationError

from quail.errors import QuailError
from quail.kinds import KINDS
from quail.planner.plan import OperatorPlan, Plan
from quail.reuse import Reuse
from quail.specs import OperatorSpec
from quail.worker.jobs import Origin, Span, Submission
from quail.worker.routing import Routed

DOCUMENTS = pa.schema([("input", pa.int8()), ("row", pa.int64()), ("text", pa.string())])


def submit_command(submission: Submission) -> bytes:
    sub = submission
    return json.dumps({"origin": asdict(sub.origin), "spec": sub.spec.to_dict(),
                       "operator_plan": asdict(sub.op), "reuse": asdict(sub.reuse), "window": asdict(sub.window),
                       "plan": sub.plan.to_dict() if sub.plan else None, "replaces": sub.replaces,
                       "predict_only": sub.predict_only, "routed": sub.routed}).encode()


def _canonical(sub: Submission) -> bytes:
    """What it asks, re-serialized from the parsed objects, so the client's JSON layout never matters."""
    return json.dumps({"spec": sub.spec.to_dict(), "operator_plan": asdict(sub.op), "reuse": asdict(sub.reuse),
                       "plan": sub.plan.hash if sub.plan else None, "predict_only": sub.predict_only},
                      sort_keys=True).encode()


def documents_digest(inputs: list[tuple[list[str], list[int]]]) -> str:
    """A hash of every side's row numbers and texts, in order."""
    h = hashlib.sha256()
    for texts, rows in inputs:
        h.update(json.dumps([rows, texts]).encode())
        h.update(b"\x1e")
    return h.hexdigest()


def content_digest(submission: Submission, model: str, documents: str) -> str:
    """What a submission asks of which model (LoadedModel.identity): the worker's key for a job and
    the task's for a window it staged."""
    return hashlib.sha256(b"\x1f".join((_canonical(submission), model.encode(), documents.encode()))).hexdigest()


UNKNOWN_JOB = b"quail:unknown-job"  # a Flight error's extra info: the worker does not know the job (restarted)
MODEL_CHANGED = b"quail:model-changed"  # ... or its model's files changed since it loaded them: it is stopping
BUSY = b"quail:busy"  # ... or it holds as many unfinished jobs of the submitter's DAG as it takes: wait
MAX_COMMAND_BYTES = 1 << 20  # a submission's JSON; its documents travel as the Arrow table


@dataclass(frozen=True)
class _Command:
    """The submit command as it travels, validated field by field (strict types; a missing or an
    unknown key is refused) before anything is stored or computed."""

    # "identity": its name before 2026-12, sent by an operator older than its worker
    origin: Annotated[Origin, Field(validation_alias=AliasChoices("origin", "identity"))]
    spec: OperatorSpec
    operator_plan: OperatorPlan  # the operator's entry of plan
    reuse: Reuse
    window: Span = Span()
    plan: Plan | None = None
    replaces: str | None = None
    predict_only: bool = False
    routed: Routed | None = None
    __pydantic_config__ = {"extra": "forbid"}


@functools.cache
def _command_type() -> TypeAdapter:
    return TypeAdapter(_Command)


def parse_submit(command: bytes) -> Submission:
    if len(command) > MAX_COMMAND_BYTES:
        raise QuailError(f"a job submission of {len(command):,} bytes: at most {MAX_COMMAND_BYTES:,}")
    try:
        c = _command_type().validate_json(command, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the command"
        raise QuailError(f"a malformed job submission: {where}: {first['msg']}") from None
    w, i = c.window, c.origin
    if w.first_row < 0 or (w.table_rows is not None and w.table_rows < 0) or i.map_index < -1 or i.window < -1:
        raise QuailError(f"a malformed job submission: window {w} or origin {i} holds a negative row or index")
    submission = Submission(i, c.spec, c.operator_plan, c.reuse, w, c.plan, c.replaces, c.predict_only, c.routed)
    try:
        _ = submission.whole_plan  # the entry must belong to the plan
    except QuailError as e:
        raise QuailError(f"a malformed job submission: {e}") from None
    spec = c.spec
    if spec.kind not in KINDS:
        raise QuailError(f"a job submission: kind {spec.kind!r} is not one of {', '.join(KINDS)}")
    KINDS[spec.kind].validate(spec, f"a job submission, operator {spec.name!r}")
    return submission


def documents_table(inputs: list[tuple[list[str], list[int]]]) -> pa.Table:
    sides, rows, texts = [], [], []
    for side, (t, r) in enumerate(inputs):
        sides += [side] * len(t)
        rows += r
        texts += t
    return pa.table([pa.array(sides, pa.int8()), pa.array(rows, pa.int64()), pa.array(texts, pa.string())],
                    schema=DOCUMENTS)


def split_documents(table: pa.Table, n_inputs: int) -> list[tuple[list[str], list[int]]]:
    if not table.schema.equals(DOCUMENTS):
        raise QuailError(f"documents must have the schema {DOCUMENTS}, got {table.schema}")
    if table.column("text").null_count or table.column("row").null_count:
        side, row = next((s, r) for s, r, t in zip(*(table.column(c).to_pylist() for c in ("input", "row", "text")))
                         if t is None or r is None)
        raise QuailError(f"document of input {side}, row {row}, has no text (or no row number)")
    sides, rows, texts = (table.column(c).to_pylist() for c in ("input", "row", "text"))
    out = []
    for side in range(n_inputs):
        picked = [(t, r) for s, r, t in zip(sides, rows, texts) if s == side]
        out.append(([t for t, _ in picked], [r for _, r in picked]))
    return out
