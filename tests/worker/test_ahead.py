"""Computing a DAG's consumers ahead in the worker: a filter's window job computes the answers of
the classify that reads its output while the window's KV is hot, keeps them in the answer store,
and the classify's own job finds them, with the answers it would have computed alone."""

import pytest

from quail.executor.engine import PhysicalSettings
from quail.runtime.compute import compute
from quail.planner.plan import plan
from quail.specs import OperatorSpec
from quail.reuse import Reuse
from quail.session import Session
from quail.store.sqlite import SqliteStore
from quail.worker.ahead import consumers_ahead
from quail.worker.client import WorkerClient
from quail.worker.jobs import Origin
from quail.worker.server import Worker

TEXTS = ["The striker scored twice in the derby.", "Rates rose again.", "The keeper saved a penalty.",
         "A new phone chip.", "The coach resigned after the final."]
FILTER = OperatorSpec("sport", "filter", ("news",), ("text",), ("Is this about sport?",), threshold=0.2)
CLASSIFY = OperatorSpec("kind", "classify", ("sport",), ("text",), ("What kind?",), ("match", "money"))


def test_only_a_filter_or_classify_of_the_same_column_without_templates_is_computed_ahead():
    specs = [FILTER, CLASSIFY, OperatorSpec("title", "classify", ("sport",), ("title",), ("Q?",), ("a", "b")),
             OperatorSpec("late", "filter", ("sport",), ("text",), ("Is it about {{ params.topic }}?",)),
             OperatorSpec("few", "filter", ("sport",), ("text",), ("Q?",), limit=3)]
    assert [c.name for c in consumers_ahead(plan(specs), FILTER)] == ["kind"]


@pytest.fixture
def client(smollm2, tmp_path):
    session = Session(smollm2, PhysicalSettings(arena_pages=256, max_batch_tokens=512))
    session.store = SqliteStore(tmp_path / "answers.sqlite")
    server = Worker(session, f"grpc+unix://{tmp_path}/w.sock", token="s3cret")
    yield WorkerClient(f"grpc+unix://{tmp_path}/w.sock", token="s3cret")
    server.shutdown()


def test_the_consumer_finds_what_its_producer_computed_ahead(client, smollm2):
    p = plan([FILTER, CLASSIFY])
    inputs = [(TEXTS, list(range(len(TEXTS))))]
    job, _ = client.submit(Origin("news", "sport", "run1"), FILTER, p["sport"], Reuse(), inputs, plan=p)
    status = client.wait(job, poll=0.05)
    passed = client.fetch(job).column("passed").to_pylist()
    kept = [(t, i) for i, (t, ok) in enumerate(zip(TEXTS, passed)) if ok]
    assert status["ahead"]["kind"]["rows"] == len(kept) and kept
    rows = [([t for t, _ in kept], list(range(len(kept))))]  # the classify reads the filter's output
    job2, _ = client.submit(Origin("news", "kind", "run1"), CLASSIFY, p["kind"], Reuse(), rows, plan=p)
    s = client.wait(job2, poll=0.05)["stats"]
    assert s["tokens_computed"] == 0 and s["tokens_reused"]["store"] == s["tokens_naive"] > 0
    alone = Session(smollm2, PhysicalSettings(arena_pages=256, max_batch_tokens=512))
    expected, _ = compute(alone, CLASSIFY, p["kind"], Reuse.none(), rows)
    got = client.fetch(job2)
    for label in ("match", "money"):
        for a, b in zip(got.column(f"p_{label}").to_pylist(), expected.column(f"p_{label}").to_pylist()):
            assert abs(a - b) < 1e-4


def test_a_job_that_keeps_no_answers_computes_nothing_ahead(client):
    p = plan([FILTER, CLASSIFY])
    job, _ = client.submit(Origin("news", "sport", "run2"), FILTER, p["sport"], Reuse(store=False),
                           [(TEXTS, list(range(len(TEXTS))))], plan=p)
    assert client.wait(job, poll=0.05)["ahead"] == {}


def test_a_window_larger_than_the_arena_is_computed_in_parts_that_its_consumer_finds_retained(client):
    """120 documents of about 4 pages each on a 256-page arena: the filter's job computes them in
    parts of half the retention pool, the classify ahead after each part, on KV still retained."""
    words = "striker keeper derby rates chip phone final coach penalty market league season".split()
    texts = [" ".join(words[(i + k) % len(words)] for k in range(30 + i % 7)) + f" {i}" for i in range(120)]
    spec = OperatorSpec("sport", "filter", ("news",), ("text",), ("Is this about sport?",), threshold=0.0)
    p = plan([spec, CLASSIFY])
    job, _ = client.submit(Origin("news", "sport", "big"), spec, p["sport"], Reuse(),
                           [(texts, list(range(len(texts))))], plan=p)
    ahead = client.wait(job, poll=0.05)["ahead"]["kind"]
    assert ahead["rows"] == len(texts)
    assert ahead["document_tokens_computed"] == 0 and ahead["retention"] > 0  # every document's KV was retained
    assert client.fetch(job).num_rows == len(texts)
