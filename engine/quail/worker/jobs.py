"""Jobs on the worker: an operator's documents, its plan entry and who asked (the identity)."""

import time
import uuid
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from quail.executor.engine import Reuse
from quail.planner.plan import OperatorPlan
from quail.planner.specs import OperatorSpec


ENDED = ("done", "failed", "cancelled")  # a job in one of these states never changes again


@dataclass(frozen=True)
class Identity:
    """Which task asked; never the try number, so an Airflow retry re-attaches to its job."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    window: int = -1  # which window of the task's rows; -1: all of them

    @property
    def key(self) -> str:
        return f"{self.dag_id}\x1f{self.run_id}\x1f{self.task_id}\x1f{self.map_index}\x1f{self.window}"

    @property
    def scope(self) -> str:
        """Namespaces retained KV's consumers by DAG run: runs never release each other's KV."""
        return f"{self.dag_id}\x1f{self.run_id}\x1f"


@dataclass
class Job:
    identity: Identity
    spec: OperatorSpec
    op: OperatorPlan
    reuse: Reuse
    inputs: list[tuple[list[str], list[int]]]
    content: str  # protocol.content_digest: what the job computes
    documents: str  # protocol.documents_digest: what it computes on
    last: bool = True  # the operator's last window: its retained KV consumers are then done
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: str = "queued"  # queued | running | done | failed | cancelled
    rows_done: int = 0
    tokens_computed: int = 0
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    answers: pa.Table | None = None
    stats: dict | None = None
    error: str | None = None
    cancel_requested: bool = False

    @property
    def rows(self) -> int:
        return len(self.inputs[0][0])

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    def status(self) -> dict:
        running = (self.finished or time.time()) - self.started if self.started else 0.0
        return {"job": self.id, "identity": asdict(self.identity), "operator": self.spec.name, "kind": self.spec.kind,
                "content": self.content, "documents": self.documents,
                "state": self.state, "rows": self.rows, "rows_done": self.rows_done,
                "tokens_computed": self.tokens_computed,
                "tokens_per_second": self.tokens_computed / running if running else 0.0,
                "stats": self.stats, "error": self.error}
