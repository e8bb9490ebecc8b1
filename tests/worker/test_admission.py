"""Issue 14, section 2: the worker admits only its owner and refuses what it cannot trust. Every
worker has a token; a submission is validated field by field before anything is stored; a live
worker's socket is never taken over; the socket is 0600 whatever the umask; the list of jobs gives
away no job id; tokens on the command line come from a private file; and another local user can
neither reach the local worker's socket nor read its token (run as uid 65534 where this test may
switch users)."""

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from quail.errors import QuailError
from quail.planner.plan import plan
from quail.specs import OperatorSpec
from quail.reuse import Reuse
from quail.worker.client import WorkerClient
from quail.worker.jobs import Origin, Submission
from quail.worker.protocol import DOCUMENTS, documents_table, parse_submit, submit_command
from quail.worker.server import Worker
from quail.worker.tokens import token_from_file

SPEC = OperatorSpec("f", "filter", ("t",), ("text",), ("Is this about sport?",), threshold=0.5)
TEXTS = ["The striker scored.", "Rates rose."]


@pytest.fixture
def worker(smollm2, tmp_path):
    from quail.executor.engine import PhysicalSettings
    from quail.session import Session

    location = f"grpc+unix://{tmp_path}/w.sock"
    server = Worker(Session(smollm2, PhysicalSettings(arena_pages=64, max_batch_tokens=256)), location, token="t0k")
    yield server, location
    server.shutdown()


def _command(**changes) -> bytes:
    doc = json.loads(submit_command(Submission(Origin("d", "f", "r"), SPEC, plan([SPEC])["f"], Reuse())))
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = doc
        for p in parents:
            target = target[p]
        target[key] = value
    return json.dumps(doc).encode()


def _put(location: str, command: bytes, table: pa.Table | None = None):
    client = flight.FlightClient(location)
    options = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer t0k")])
    table = table if table is not None else documents_table([(TEXTS, [0, 1])])
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), table.schema, options=options)
    with writer:
        writer.write_table(table)
        writer.done_writing()
        return json.loads(reader.read().to_pybytes())


@pytest.mark.parametrize("change, says", [
    ({"spec__threshold": float("nan")}, "threshold nan"),
    ({"spec__limit": -5}, "limit must be a positive number"),
    ({"spec__limit": 1.5}, "spec.limit: Input should be a valid integer"),
    ({"spec__limit": True}, "spec.limit: Input should be a valid integer"),
    ({"spec__threshold": "0.5"}, "spec.threshold: Input should be a valid number"),
    ({"spec__questions": "Sport?"}, "spec.questions: Input should be a valid array"),
    ({"spec__outptu": "x.parquet"}, "spec.outptu: Unexpected keyword argument"),
    ({"origin__map_index": "0"}, "origin.map_index"),
    ({"reuse__rewind": "no"}, "reuse.rewind: Input should be a valid boolean"),
    ({"window__first_row": -1}, "negative row"),
])
def test_a_submission_is_validated_field_by_field_before_anything_is_stored(worker, change, says):
    server, location = worker
    with pytest.raises(flight.FlightServerError, match=f"malformed job submission|{says}") as e:
        _put(location, _command(**change))
    assert says in str(e.value)
    assert server.jobs == {}


def test_a_null_text_is_refused_naming_its_row_not_computed_as_none(worker):
    server, location = worker
    table = pa.table([pa.array([0, 0], pa.int8()), pa.array([0, 7], pa.int64()), pa.array(["A match.", None])],
                     schema=DOCUMENTS)
    with pytest.raises(flight.FlightServerError, match="row 7, has no text"):
        _put(location, _command(), table)
    assert server.jobs == {}


def test_oversized_requests_are_refused_not_stored(worker):
    server, location = worker
    with pytest.raises(flight.FlightServerError, match="at most 1,048,576"):
        _put(location, _command(spec__name="x" * (50 << 20)))
    client = WorkerClient(location, "t0k")
    with pytest.raises(QuailError, match="at most 256"):
        client.status("j" * 100_000)
    assert server.jobs == {} and client.status() == []


def test_the_list_of_jobs_gives_away_no_id_and_the_id_is_what_fetches(worker):
    _, location = worker
    client = WorkerClient(location, "t0k")
    job, _ = client.submit(Origin("d", "f", "r"), SPEC, plan([SPEC])["f"], Reuse(), [(TEXTS, [0, 1])])
    client.wait(job, poll=0.05)
    [listed] = client.status()
    assert job not in json.dumps(listed) and "content" not in listed and listed["state"] == "done"
    assert client.fetch(job).num_rows == 2 and client.status(job)["job"] == job


def test_one_dag_queues_at_most_max_queued_jobs_and_a_submission_waits_its_turn(worker, monkeypatch):
    """10,000 jobs from one token holder were taken in 18 s, an hour of backlog for every other DAG.
    A DAG now holds at most `max_queued` unfinished jobs; beyond, the worker says so and the client
    waits and submits again; another DAG is still taken."""
    import threading

    from quail.worker import client as client_module
    from quail.worker.client import WorkerBusy

    server, location = worker
    server.max_queued = 2
    gate, run = threading.Event(), server._run
    monkeypatch.setattr(server, "_run", lambda job: (gate.wait(30), run(job)))  # jobs wait at the gate
    client = WorkerClient(location, "t0k")

    def submit(dag: str, task: str) -> str:
        return client.submit(Origin(dag, task, "r"), SPEC, plan([SPEC])["f"], Reuse(), [(TEXTS, [0, 1])])[0]

    monkeypatch.setattr(client_module, "BUSY_TIMEOUT", 0.0)
    first = [submit("flood", f"t{i}") for i in range(2)]
    with pytest.raises(WorkerBusy, match="2 unfinished jobs of DAG 'flood' .at most 2 a DAG and 8 in all"):
        submit("flood", "t2")
    other = submit("other", "t0")  # another DAG is not held up by the flood
    monkeypatch.setattr(client_module, "BUSY_TIMEOUT", 60.0)
    threading.Timer(1.0, gate.set).start()
    late = submit("flood", "t2")  # waits until the gate lets the first ones end, then is taken
    for job in [*first, other, late]:
        assert client.wait(job, poll=0.05)["state"] == "done"
    assert len(server.jobs) == 4


def test_a_live_workers_socket_is_not_taken_over_and_a_stale_one_is(worker, smollm2, tmp_path):
    from quail.executor.engine import PhysicalSettings
    from quail.session import Session

    server, location = worker
    sock = Path(location.removeprefix("grpc+unix://"))
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    with pytest.raises(QuailError, match="already listens"):
        Worker(server.session, location, token="other")
    assert WorkerClient(location, "t0k").status() == []  # the first still answers
    stale = tmp_path / "stale.sock"
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # a socket file nobody listens on: a worker that died
    old = os.umask(0)
    try:
        second = Worker(Session(smollm2, PhysicalSettings(arena_pages=16, max_batch_tokens=64)), f"grpc+unix://{stale}",
                        token="t2")
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(stale.stat().st_mode) == 0o600  # whatever the umask
        assert WorkerClient(f"grpc+unix://{stale}", "t2").status() == []
    finally:
        second.shutdown()


def test_a_token_file_must_be_private(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(0o644)
    with pytest.raises(QuailError, match="open to other users .* chmod 600"):
        token_from_file(str(path))
    path.chmod(0o600)
    assert token_from_file(str(path)) == "s3cret"


@pytest.mark.model  # a local worker loads smollm2
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to switch users")
def test_another_local_user_can_neither_reach_the_local_worker_nor_read_its_token(monkeypatch):
    from quail.worker.local import ensure_local_worker, stop_local_workers

    home = Path(tempfile.mkdtemp(prefix="quail-two-users-", dir="/tmp"))
    home.chmod(0o755)  # only Quail's own folder may keep the other user out
    monkeypatch.setenv("QUAIL_HOME", str(home))
    try:
        location, token = ensure_local_worker("smollm2-135m", "float32", 64)
        sock = location.removeprefix("grpc+unix://")
        probe = ("import socket, sys\n"
                 "s = socket.socket(socket.AF_UNIX)\n"
                 "try:\n    s.connect(sys.argv[1]); print('connected')\nexcept OSError as e: print(type(e).__name__)\n"
                 "try:\n    print(open(sys.argv[2]).read())\nexcept OSError as e: print(type(e).__name__)\n")
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                              probe, sock, str(Path(sock).with_suffix(".token"))],
                             capture_output=True, text=True, check=True, cwd="/").stdout.split()
        assert out == ["PermissionError", "PermissionError"] and token not in out
        assert WorkerClient(location, token).status() == []  # its owner still gets in
    finally:
        stop_local_workers(home / "worker")
        shutil.rmtree(home, ignore_errors=True)


def test_an_older_operators_submission_under_identity_is_parsed_as_its_origin():
    """Workers upgrade before the operators that submit to them: the origin's earlier key still parses."""
    doc = json.loads(_command())
    doc["identity"] = doc.pop("origin")
    assert parse_submit(json.dumps(doc).encode()).origin == Origin("d", "f", "r")
    del doc["identity"]
    with pytest.raises(QuailError, match="malformed job submission: origin: Field required"):
        parse_submit(json.dumps(doc).encode())
