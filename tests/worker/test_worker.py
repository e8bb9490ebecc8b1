"""The worker over Arrow Flight on a Unix socket: jobs, re-attaching, retention across jobs of one
DAG run, isolation between runs, and the token."""

import time

import pyarrow as pa
import pytest

from quail.errors import QuailError
from quail.executor.engine import PhysicalSettings
from quail.runtime.compute import compute
from quail.planner.plan import plan
from quail.specs import OperatorSpec
from quail.reuse import Reuse
from quail.session import Session
from quail.worker.client import WorkerClient
from quail.worker.jobs import Origin, job_ref
from quail.worker.server import Worker

TEXTS = ["The striker scored twice in the derby.", "Rates rose again.", "The keeper saved a penalty.",
         "A new phone chip.", "The striker scored twice in the derby."]
SPECS = [OperatorSpec("sport", "filter", ("news",), ("text",), ("Is this about sport?",), threshold=0.0),
         OperatorSpec("kind", "classify", ("sport",), ("text",), ("What kind?",), ("match", "money"))]


@pytest.fixture
def session(smollm2):
    return Session(smollm2, PhysicalSettings(arena_pages=256, max_batch_tokens=512))


@pytest.fixture
def worker(session, tmp_path):
    location = f"grpc+unix://{tmp_path}/w.sock"
    server = Worker(session, location, token="s3cret")
    yield server, location
    server.shutdown()


def _inputs():
    return [(TEXTS, list(range(len(TEXTS))))]


def test_jobs_match_local_compute_and_retention_crosses_jobs(worker, smollm2):
    server, location = worker
    client = WorkerClient(location, token="s3cret")
    p = plan(SPECS)
    run = Origin("news", "sport", "run1")
    job, attached = client.submit(run, SPECS[0], p["sport"], Reuse(), _inputs())
    assert not attached
    assert client.wait(job, poll=0.05)["state"] == "done"
    answers = client.fetch(job)
    again, attached = client.submit(run, SPECS[0], p["sport"], Reuse(), _inputs())  # an Airflow retry
    assert again == job and attached
    second = Origin("news", "kind", "run1")
    job2, _ = client.submit(second, SPECS[1], p["kind"], Reuse(), _inputs())
    status = client.wait(job2, poll=0.05)
    assert status["stats"]["tokens_reused"]["retention"] > 0  # the filter's KV, kept for this task
    assert status["rows_done"] == len(TEXTS)
    engine = server.session.engine
    assert engine.free_pages == engine.settings.arena_pages  # the last consumer released it
    local = Session(smollm2, PhysicalSettings(arena_pages=256, max_batch_tokens=512))
    expected, _ = compute(local, SPECS[0], p["sport"], Reuse.none(), _inputs())
    assert answers.column("passed").to_pylist() == expected.column("passed").to_pylist()
    for a, b in zip(answers.column("p_yes_1").to_pylist(), expected.column("p_yes_1").to_pylist()):
        assert abs(a - b) < 2e-2  # bf16: reuse changes the batch shapes, not the answer


def test_runs_are_isolated_and_status_lists_jobs(worker):
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    p = plan(SPECS)
    a, _ = client.submit(Origin("news", "sport", "run1"), SPECS[0], p["sport"], Reuse(), _inputs())
    b, attached = client.submit(Origin("news", "sport", "run2"), SPECS[0], p["sport"], Reuse(), _inputs())
    assert a != b and not attached
    client.wait(b, poll=0.05)
    assert {s["ref"] for s in client.status()} >= {job_ref(a), job_ref(b)}


def test_the_token_is_required(worker):
    _, location = worker
    with pytest.raises(QuailError, match="refused the token"):
        WorkerClient(location).status()
    with pytest.raises(QuailError, match="did not prove it holds the connection's token"):  # never sent
        WorkerClient(location, token="wrong").status()


def test_errors_name_the_problem(worker, tmp_path):
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    with pytest.raises(QuailError, match="no job 'nope'"):
        client.fetch("nope")
    with pytest.raises(QuailError, match="no Quail worker answers"):
        WorkerClient(f"grpc+unix://{tmp_path}/absent.sock", timeout=2).status()
    with pytest.raises(QuailError, match="needs a token"):
        Worker(None, f"grpc+unix://{tmp_path}/w2.sock", token="")


def test_error_replies_carry_a_message_and_never_a_traceback(worker, monkeypatch, capsys):
    import pyarrow.flight as flight

    server, location = worker
    client = flight.FlightClient(location)
    options = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer s3cret")])
    what = flight.FlightDescriptor.for_command(b"x")
    calls = {"list_flights": lambda: list(client.list_flights(options=options)),
             "get_flight_info": lambda: client.get_flight_info(what, options=options),
             "get_schema": lambda: client.get_schema(what, options=options),
             "do_exchange": lambda: client.do_exchange(what, options=options)[1].read_all(),
             "do_put": lambda: client.do_put(what, pa.schema([("x", pa.int64())]), options=options)[1].read(),
             "do_action": lambda: list(client.do_action(flight.Action("info", b""), options=options))}
    monkeypatch.setattr(server, "info", lambda: 1 / 0)  # an error nobody foresaw
    for name, call in calls.items():
        with pytest.raises((pa.ArrowException, OSError)) as e:  # a refusal in the middleware arrives as OSError
            call()
        said = str(e.value)
        assert "Traceback" not in said and "File \"" not in said, (name, said)
        assert {"do_put": "a malformed job submission", "do_action": "the worker failed: ZeroDivisionError"}.get(
            name, f"{name} is not offered") in said, (name, said)
    assert "Traceback" in capsys.readouterr().err  # the worker's owner sees where it failed


def test_a_failed_job_reports_its_error(worker):
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    spec = OperatorSpec("f", "filter", ("t",), ("text",), ("Q?",))
    long_text = ["word " * 9000]
    job, _ = client.submit(Origin("d", "f", "r"), spec, plan([spec])["f"], Reuse(), [(long_text, [7])])
    status = client.wait(job, poll=0.05)
    assert status["state"] == "failed" and "row 7" in status["error"]
    with pytest.raises(QuailError, match="failed"):
        client.fetch(job)


@pytest.mark.model  # `quail worker serve --model`
def test_quail_worker_serve_and_status_as_processes(tmp_path):
    """The real command: a separate process on a Unix socket, a job from this one, then status, and
    its metrics scraped."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    from tests.worker.test_metrics import scrape, total

    sock = tmp_path / "w.sock"
    env = dict(os.environ, QUAIL_WORKER_TOKEN="t0k")
    quail = [sys.executable, "-m", "quail.cli"]
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proc = subprocess.Popen(quail + ["worker", "serve", "--model", "smollm2-135m", "--socket", str(sock),
                                     "--arena-pages", "256", "--threads", "1", "--metrics-port", str(port)], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not sock.exists():
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.2)
        client = WorkerClient(f"grpc+unix://{sock}", token="t0k")
        job, _ = client.submit(Origin("news", "sport", "r1"), SPECS[0], plan(SPECS)["sport"], Reuse(), _inputs())
        stats = client.wait(job, poll=0.1)["stats"]
        metrics = scrape(port)
        assert total(metrics, "quail_tokens_computed_total", dag="news") == stats["tokens_computed"] > 0
        for mechanism, reused in stats["tokens_reused"].items():
            assert total(metrics, "quail_tokens_reused_total", mechanism=mechanism) == reused
        out = subprocess.run(quail + ["worker", "status", "--socket", str(sock)], env=env, capture_output=True,
                             text=True, check=True).stdout
        assert "news/r1/sport" in out and "done" in out and f"{len(TEXTS)}/{len(TEXTS)} rows" in out
        # the device and its memory: the weights' bytes, the reserve and how the arena was sized
        assert "smollm2-135m" in out and "on cpu (" in out and "GiB of weights, reserve 0.00 GiB" in out
        assert "arena 256 pages (given)" in out
        assert f"answers in {os.environ['QUAIL_ANSWER_STORE']}" in out  # its answer store, by its path
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_job_that_breaks_halfway_frees_its_pages_and_the_next_one_runs(worker, monkeypatch):
    server, location = worker
    client = WorkerClient(location, token="s3cret")
    engine = server.session.engine
    runner = engine.scheduler.runner
    real, calls = runner.run, []

    def breaks_on_the_second_pass(chunks):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("device lost")
        return real(chunks)

    monkeypatch.setattr(runner, "run", breaks_on_the_second_pass)
    spec = OperatorSpec("f", "filter", ("t",), ("text",), ("Sport?", "A goal?"), threshold=0.0)
    job, _ = client.submit(Origin("d", "f", "r1"), spec, plan([spec])["f"], Reuse(), _inputs())
    status = client.wait(job, poll=0.05)
    assert status["state"] == "failed" and "device lost" in status["error"]
    assert engine.free_pages == engine.settings.arena_pages
    job, _ = client.submit(Origin("d", "f", "r2"), spec, plan([spec])["f"], Reuse(), _inputs())
    assert client.wait(job, poll=0.05)["state"] == "done"
    assert engine.free_pages == engine.settings.arena_pages


def test_concurrent_jobs_share_forward_passes(worker):
    server, location = worker
    client = WorkerClient(location, token="s3cret")
    p = plan(SPECS)
    texts = [f"{t} Report {i}." for i in range(12) for t in TEXTS]
    inputs = [(texts, list(range(len(texts))))]
    jobs = [client.submit(Origin("news", "sport", run), SPECS[0], p["sport"], Reuse(), inputs)[0]
            for run in ("run1", "run2")]
    done = [client.wait(job, poll=0.05) for job in jobs]
    assert [s["state"] for s in done] == ["done", "done"]
    first, second = (client.fetch(job).column("passed").to_pylist() for job in jobs)
    assert first == second
    passes = sum(s["stats"]["forward_passes"] for s in done)
    assert server.session.engine.scheduler.forward_passes < passes


def test_cancelling_a_running_job_stops_it_and_frees_its_pages(worker):
    server, location = worker
    client = WorkerClient(location, token="s3cret")
    texts = [f"{t} Report {i}." for i in range(60) for t in TEXTS]
    origin = Origin("news", "sport", "run1")
    job, _ = client.submit(origin, SPECS[0], plan(SPECS)["sport"], Reuse(), [(texts, list(range(len(texts))))])
    while (s := client.status(job))["rows_done"] == 0:
        assert s["state"] in ("queued", "running")
    client.cancel(job)
    status = client.wait(job, poll=0.05)
    assert status["state"] == "cancelled" and status["rows_done"] < len(texts)
    engine = server.session.engine
    engine.scheduler.call(engine.pool.clear)  # what the filter kept for the classify
    assert engine.free_pages == engine.settings.arena_pages
    again, attached = client.submit(origin, SPECS[0], plan(SPECS)["sport"], Reuse(), _inputs())
    assert again != job and not attached  # a retry after a cancel computes anew
    assert client.wait(again, poll=0.05)["state"] == "done"


def test_a_rerun_on_changed_input_is_a_new_job_and_cancels_the_stale_one_it_names(worker):
    """A cleared task re-run after its data changed must not re-attach to the old job's answers; it
    cancels the old job by its id, which the task kept in its staging folder."""
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    origin, p = Origin("news", "sport", "scheduled__2026-12-01"), plan(SPECS)
    many = [f"{t} Report {i}." for i in range(60) for t in TEXTS]
    old, _ = client.submit(origin, SPECS[0], p["sport"], Reuse(), [(many, list(range(len(many))))])
    new, attached = client.submit(origin, SPECS[0], p["sport"], Reuse(), _inputs(), replaces=old)
    assert new != old and not attached
    assert client.wait(old, poll=0.05)["state"] == "cancelled"
    status = client.wait(new, poll=0.05)
    assert status["state"] == "done" and status["rows"] == len(TEXTS)
    assert client.fetch(new).column("row").to_pylist() == list(range(len(TEXTS)))
    again, attached = client.submit(origin, SPECS[0], p["sport"], Reuse(), _inputs())
    assert again == new and attached  # the same content still re-attaches


def test_a_resubmission_with_other_content_cannot_cancel_a_job_without_its_id(worker):
    """Probe 7: any token holder could cancel another task's running job by resubmitting its
    predictable origin with other documents. Without the job's id, both jobs now run."""
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    origin, p = Origin("news", "sport", "scheduled__2026-12-01"), plan(SPECS)
    many = [f"{t} Report {i}." for i in range(60) for t in TEXTS]
    victim, _ = client.submit(origin, SPECS[0], p["sport"], Reuse(), [(many, list(range(len(many))))])
    for replaces in (None, "0" * 32):
        other, attached = client.submit(origin, SPECS[0], p["sport"], Reuse(), [([f"x {replaces}"], [0])],
                                        replaces=replaces)
        assert other != victim and not attached
        assert client.wait(other, poll=0.05)["state"] == "done"
    status = client.wait(victim, poll=0.05)
    assert status["state"] == "done" and status["rows_done"] == len(many)
    again, attached = client.submit(origin, SPECS[0], p["sport"], Reuse(), [(many, list(range(len(many))))])
    assert again == victim and attached  # the victim's retry still finds its own job


def test_a_submission_for_the_same_origin_with_other_content_is_never_attached(worker):
    """Someone who pre-submits for a predictable run id cannot hand the real task their answers:
    another spec, plan, reuse switch or document each makes another job."""
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    origin, p = Origin("news", "sport", "scheduled__2026-12-01"), plan(SPECS)
    stricter = OperatorSpec("sport", "filter", ("news",), ("text",), ("Is this about sport?",), threshold=1.0)
    variants = [(stricter, p["sport"], Reuse(), _inputs()),
                (SPECS[0], p["sport"], Reuse.none(), _inputs()),
                (SPECS[0], p["sport"], Reuse(), [(TEXTS[:-1] + ["Rates fell."], list(range(len(TEXTS))))]),
                (SPECS[0], p["sport"], Reuse(), [(TEXTS, list(range(1, len(TEXTS) + 1)))])]
    planted = [client.submit(origin, *v)[0] for v in variants]
    real, attached = client.submit(origin, SPECS[0], p["sport"], Reuse(), _inputs())
    assert not attached and real not in planted
    assert client.wait(real, poll=0.05)["state"] == "done"
    assert client.fetch(real).column("passed").to_pylist() == [True] * len(TEXTS)  # threshold 0, not 1


def test_concurrent_submissions_share_a_job_only_when_their_content_is_equal(worker):
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    origin, p = Origin("news", "sport", "r1"), plan(SPECS)
    a = [(TEXTS[:2], [0, 1])]
    b = [(TEXTS[2:], [0, 1, 2])]
    results = {}

    def submit(name, inputs):
        results[name] = client.submit(origin, SPECS[0], p["sport"], Reuse(), inputs)

    import threading

    threads = [threading.Thread(target=submit, args=(n, i)) for n, i in (("a1", a), ("a2", a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a1"][0] == results["a2"][0] and results["a1"][1] != results["a2"][1]
    job_b, attached = client.submit(origin, SPECS[0], p["sport"], Reuse(), b)
    assert job_b != results["a1"][0] and not attached
    status = client.wait(job_b, poll=0.05)
    assert status["rows"] == 3 and client.fetch(job_b).num_rows == 3  # B's 3 documents, not A's 2


def test_an_ended_job_keeps_its_answers_but_not_its_documents(worker):
    server, location = worker
    client = WorkerClient(location, token="s3cret")
    job, _ = client.submit(Origin("news", "sport", "r1"), SPECS[0], plan(SPECS)["sport"], Reuse(), _inputs())
    status = client.wait(job, poll=0.05)
    assert status["rows"] == len(TEXTS) and client.fetch(job).num_rows == len(TEXTS)
    assert server.jobs[job].inputs == []  # memory follows the windows in flight, not every table seen


def test_a_job_reports_the_plans_prediction_beside_its_accounting(worker):
    _, location = worker
    client = WorkerClient(location, token="s3cret")
    p = plan(SPECS)
    done = {}
    for spec in SPECS:
        job, _ = client.submit(Origin("news", spec.name, "r1"), spec, p[spec.name], Reuse(), _inputs(), plan=p)
        done[spec.name] = client.wait(job, poll=0.05)
    for s in done.values():  # one predicate, one question: every document is asked once, as predicted
        assert s["predicted"]["tokens_naive"] == s["stats"]["tokens_naive"] > 0
        assert sum(s["predicted"]["tokens_reused"].values()) + s["predicted"]["tokens_computed"] == \
               s["predicted"]["tokens_naive"]
    assert done["kind"]["predicted"]["tokens_reused"]["retention"] > 0  # the plan keeps the filter's KV for it
    # without the plan, the entry is predicted alone: nothing upstream to keep KV for it
    job, _ = client.submit(Origin("news", "kind", "r2"), SPECS[1], p["kind"], Reuse(), _inputs())
    assert client.wait(job, poll=0.05)["predicted"]["tokens_reused"]["retention"] == 0


def test_a_default_window_of_long_documents_submits_at_once_and_runs(worker):
    """Probe 6: 8,192 rows of about 800 words failed with a raw FlightTimedOutError after 30 s,
    every try, because the worker tokenized the window before answering. The documents now stream
    in batches and the job tokenizes them: the submission is answered well within the default
    30 s timeout, and the job runs."""
    from quail.pipeline.stream import DEFAULT_WINDOW_ROWS

    _, location = worker
    client = WorkerClient(location, token="s3cret")
    words = ("the home side won the match after a late goal in the second half " * 54).split()[:800]
    texts = [f"{i} " + " ".join(words) for i in range(DEFAULT_WINDOW_ROWS)]
    origin, p = Origin("news", "sport", "long"), plan(SPECS)
    started = time.monotonic()
    job, attached = client.submit(origin, SPECS[0], p["sport"], Reuse(), [(texts, list(range(len(texts))))])
    assert not attached and time.monotonic() - started < client.timeout / 2
    deadline = time.monotonic() + 300
    while (s := client.status(job))["rows_done"] == 0:
        assert s["state"] in ("queued", "running") and time.monotonic() < deadline, s
        time.sleep(0.5)
    client.cancel(job)
    assert client.wait(job, poll=0.2)["state"] == "cancelled"


def test_a_ticket_that_is_not_utf8_gets_an_error_not_a_traceback(worker):
    import pyarrow.flight as flight

    _, location = worker
    client = WorkerClient(location, token="s3cret")
    with pytest.raises(QuailError) as e:
        client._call(lambda options: client.client.do_get(flight.Ticket(b"\xff\xfe job"), options=options).read_all())
    assert "no job" in str(e.value) and "Traceback" not in str(e.value) and "Detail" not in str(e.value)
