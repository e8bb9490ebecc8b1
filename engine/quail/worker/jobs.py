"""Jobs on the worker: an operator's documents, its plan entry and who asked (its origin)."""

import hashlib
import secrets
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Final

import pyarrow as pa

from quail.planner.plan import OperatorPlan, Plan
from quail.reuse import Reuse
from quail.specs import OperatorSpec
from quail.worker.routing import Routed


class JobState(StrEnum):
    """A job's state on the worker; the wire carries the plain strings."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


ENDED: frozenset[str] = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})  # never changes again
CHARS_PER_TOKEN = 4  # English text with a BPE vocabulary, for a job's load before it is tokenized
LOST: Final = "lost"  # not a job's state: a trigger's report that the worker no longer answers, or knows the job


def job_ref(job_id: str) -> str:
    """A name for a job in listings that does not give away its id."""
    return hashlib.sha256(job_id.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Origin:
    """Which task asked; never the try number, so an Airflow retry re-attaches to its job."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    window: int = -1  # which window of the task's rows; -1: all of them
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)

    @property
    def key(self) -> str:
        return f"{self.dag_id}\x1f{self.run_id}\x1f{self.task_id}\x1f{self.map_index}\x1f{self.window}"

    @property
    def scope(self) -> str:
        """Namespaces retained KV's consumers by DAG run, and by map index for mapped tasks: runs
        never release each other's KV, and index i of a mapped consumer releases only what index i
        of its mapped producer kept for it."""
        index = f"{self.map_index}\x1f" if self.map_index >= 0 else ""
        return f"{self.dag_id}\x1f{self.run_id}\x1f{index}"


@dataclass(frozen=True)
class Span:
    """Where a job's window sits in the operator's table, for progress over the whole table."""

    first_row: int = 0
    table_rows: int | None = None  # None: not known up front (a CSV file, a query)
    last: bool = True  # the operator's last window: KV kept for it can go after this job
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)


@dataclass(frozen=True)
class Submission:
    """What a task asks of the worker, less the documents."""

    origin: Origin
    spec: OperatorSpec
    op: OperatorPlan  # the operator's plan entry: how it computes
    reuse: Reuse
    window: Span = Span()
    plan: Plan | None = None  # the plan the entry belongs to; None: the operator was planned alone
    replaces: str | None = None  # the id of this origin's earlier job, which the submitter may cancel
    predict_only: bool = False  # the job's predicted accounting only, for a budget checked before any computing
    routed: Routed | None = None  # how the task chose this worker among several (None: it had one): for metrics

    @property
    def whole_plan(self) -> Plan:
        """The plan the entry belongs to, or one of this operator alone: what the job's accounting is
        predicted from."""
        return (self.plan or Plan((self.spec,), (self.op,))).with_entry(self.op)


@dataclass
class Job:
    submission: Submission
    inputs: list[tuple[list[str], list[int]]]
    content: str  # protocol.content_digest: what the job computes
    documents: str  # protocol.documents_digest: what it computes on
    model: str = ""  # the identity of the model that computes it (LoadedModel.identity)
    id: str = field(default_factory=lambda: secrets.token_hex(16))  # a capability: only the submitter has it
    state: JobState = JobState.QUEUED
    rows_done: int = 0
    tokens_computed: int = 0
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    results: pa.Table | None = None
    stats: dict | None = None
    predicted: dict | None = None  # the plan's expected accounting of these documents
    # consumer -> rows whose answers it computed ahead, the tokens that took, and those it found retained
    ahead: dict[str, dict[str, int]] = field(default_factory=dict)
    error: str | None = None
    cancel_requested: bool = False
    docs: list[list[int]] = field(default_factory=list)  # the first input's documents, as the layout renders them
    rows: int = field(init=False)
    document_tokens: int = field(init=False)  # the load it brings; estimated from its characters until tokenized

    def __post_init__(self):
        self.rows = len(self.inputs[0][0])
        self.document_tokens = sum(map(len, self.inputs[0][0])) // CHARS_PER_TOKEN

    def tokenized(self, docs: list[list[int]]) -> None:
        self.docs, self.document_tokens = docs, sum(map(len, docs))

    @property
    def origin(self) -> Origin:
        return self.submission.origin

    @property
    def spec(self) -> OperatorSpec:
        return self.submission.spec

    @property
    def window(self) -> Span:
        return self.submission.window

    @property
    def queued_seconds(self) -> float:
        """How long it waited before it computed (or was cancelled), or has waited so far."""
        return (self.started or self.finished or time.time()) - self.submitted

    @property
    def queued_tokens(self) -> int:
        """Document tokens not computed yet: what a router weighs this job by."""
        return 0 if self.ended else self.document_tokens * (self.rows - self.rows_done) // max(self.rows, 1)

    def release_inputs(self) -> None:
        """An ended job keeps its answers until they expire, not its documents: a worker's memory
        follows the windows in flight, not the tables it has seen."""
        self.inputs, self.docs = [], []

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    def listing(self) -> dict:
        """What any token holder sees of the job in the list of all jobs: who asked and how far it is,
        not its id (the capability to fetch or cancel it, known to its submitter only), its digests
        or its error text."""
        doc = self.status()
        for key in ("job", "content", "documents", "error"):
            del doc[key]
        return {"ref": job_ref(self.id), **doc}

    def status(self) -> dict:
        running = (self.finished or time.time()) - self.started if self.started else 0.0
        rate = self.rows_done / running if running else 0.0
        w = self.window
        left = None if w.table_rows is None else w.table_rows - w.first_row - self.rows_done
        return {"job": self.id, "origin": asdict(self.origin), "operator": self.spec.name, "kind": self.spec.kind,
                "content": self.content, "documents": self.documents, "model": self.model,
                "state": self.state, "rows": self.rows, "rows_done": self.rows_done,
                "tokens_computed": self.tokens_computed,
                "tokens_per_second": self.tokens_computed / running if running else 0.0,
                "queued_seconds": self.queued_seconds,
                "first_row": self.window.first_row, "table_rows": self.window.table_rows,
                "eta_seconds": left / rate if left is not None and rate else None,
                "stats": self.stats, "predicted": self.predicted, "ahead": self.ahead, "error": self.error}
