"""A TCP worker behind TLS (#33 item 13): a client that trusts the worker's certificate authority
talks to it; one that does not, or a squatter on the port without the certificate, gets an error
that says so and is never sent the token; the CLI refuses a key others can read, and the hook
reaches a TLS worker through its connection's `tls_ca`."""

import datetime
import json
import socket
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from quail.errors import QuailError
from quail.worker.client import WorkerClient
from quail.worker.server import Worker

TOKEN = "tls-t0k"


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _authority(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate) -> tuple[bytes, bytes]:
    """A certificate for localhost and 127.0.0.1, signed by `ca`, and its key, both PEM."""
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem(key)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pki(tmp_path):
    ca_key, ca = _authority("quail test authority")
    cert, key = _leaf(ca_key, ca)
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "other-ca.pem").write_bytes(_authority("another authority")[1].public_bytes(serialization.Encoding.PEM))
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    (tmp_path / "key.pem").chmod(0o600)
    return tmp_path


def _serve(smollm2, location: str, tls: tuple[bytes, bytes] | None) -> Worker:
    from quail.executor.engine import PhysicalSettings
    from quail.session import Session

    server = Worker(Session(smollm2, PhysicalSettings(arena_pages=64, max_batch_tokens=256)), location, TOKEN, tls=tls)
    threading.Thread(target=server.serve, daemon=True).start()
    return server


def test_a_client_that_trusts_the_authority_reaches_the_worker_and_others_are_told_why_not(smollm2, pki):
    port = _port()
    server = _serve(smollm2, f"grpc+tls://127.0.0.1:{port}",
                    ((pki / "cert.pem").read_bytes(), (pki / "key.pem").read_bytes()))
    try:
        location = f"grpc+tls://127.0.0.1:{port}"
        assert WorkerClient(location, TOKEN, timeout=10, tls_ca=str(pki / "ca.pem")).info()["model"]
        for ca in (None, str(pki / "other-ca.pem")):  # the system's authorities, another one
            with pytest.raises(QuailError, match="did not prove who it is"):
                WorkerClient(location, TOKEN, timeout=10, tls_ca=ca).info()
        with pytest.raises(QuailError):  # plain gRPC to a TLS port
            WorkerClient(f"grpc://127.0.0.1:{port}", TOKEN, timeout=10).info()
    finally:
        server.shutdown()


def test_a_squatter_without_the_certificate_never_receives_the_token(smollm2, pki):
    """Whoever holds the port without the certificate (here a plain worker recording the headers it
    gets) fails the handshake, so the client sends it neither the token nor any documents."""
    from quail.worker import server as server_module

    seen: list[str] = []
    check = server_module._TokenCheck.start_call

    def recording(self, info, headers):
        seen.extend(v for k, vs in headers.items() if k.lower() == "authorization" for v in vs)
        return check(self, info, headers)

    port = _port()
    server_module._TokenCheck.start_call = recording
    squatter = _serve(smollm2, f"grpc://127.0.0.1:{port}", None)
    try:
        with pytest.raises(QuailError):
            WorkerClient(f"grpc+tls://127.0.0.1:{port}", TOKEN, timeout=10, tls_ca=str(pki / "ca.pem")).info()
        # #48 10: a client whose token is not the worker's learns so before it sends the token
        with pytest.raises(QuailError, match="did not prove it holds the connection's token"):
            WorkerClient(f"grpc://127.0.0.1:{port}", "not-the-token", timeout=10).info()
        assert not seen
        assert WorkerClient(f"grpc://127.0.0.1:{port}", TOKEN, timeout=10).info()["model"]
        assert seen == [f"Bearer {TOKEN}"]  # the recorder hears the token only from a client that holds it
    finally:
        server_module._TokenCheck.start_call = check
        squatter.shutdown()


def test_the_hook_reaches_a_tls_worker_through_its_connections_tls_ca(smollm2, pki, monkeypatch):
    from airflow_quail.hooks.quail import QuailHook

    port = _port()
    server = _serve(smollm2, f"grpc+tls://127.0.0.1:{port}",
                    ((pki / "cert.pem").read_bytes(), (pki / "key.pem").read_bytes()))
    try:
        monkeypatch.setenv("AIRFLOW_CONN_QUAIL_TLS", json.dumps({
            "conn_type": "quail", "host": "127.0.0.1", "port": port, "password": TOKEN,
            "extra": {"tls_ca": str(pki / "ca.pem")}}))
        client = QuailHook("quail_tls").get_conn("dag")
        assert client.location == f"grpc+tls://127.0.0.1:{port}" and client.info()["model"]
        ok, message = QuailHook("quail_tls").test_connection()
        assert ok, message
    finally:
        server.shutdown()


@pytest.mark.parametrize("flags, says", [
    (["--tls-cert", "{d}/cert.pem"], "quail: error: --tls-key is missing: a certificate chain"),
    (["--tls-cert", "{d}/cert.pem", "--tls-key", "{d}/open-key.pem"], "is open to other users"),
    (["--tls-cert", "{d}/missing.pem", "--tls-key", "{d}/key.pem"], "--tls-cert {d}/missing.pem"),
    (["--socket", "{d}/w.sock", "--tls-cert", "{d}/cert.pem", "--tls-key", "{d}/key.pem"], "TLS is for a TCP worker"),
])
def test_tls_settings_that_cannot_work_are_refused_before_the_model_loads(pki, capsys, flags, says):
    from quail.cli.main import main

    (pki / "open-key.pem").write_bytes((pki / "key.pem").read_bytes())
    (pki / "open-key.pem").chmod(0o644)
    with pytest.raises(SystemExit) as exit_:
        main(["worker", "serve", "--model", "smollm2-135m", *(f.format(d=pki) for f in flags)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "quail: error:" in err and says.format(d=pki) in err, err


def test_a_worker_serves_on_ipv6_loopback(smollm2):
    from quail.worker.locations import tcp_location

    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    location = tcp_location("grpc", "::1", port)
    assert location == f"grpc://[::1]:{port}"
    server = _serve(smollm2, location, None)
    try:
        client = WorkerClient(location, TOKEN, timeout=10)
        assert client.info()["model"]
        with pytest.raises(QuailError, match="stop is for a local worker on a Unix socket"):
            client.stop()  # a token holder stops no TCP worker
        assert client.info()["model"]
    finally:
        server.shutdown()


def test_a_squatter_that_answers_like_a_worker_gets_no_token_and_is_a_lost_worker():
    """#48 10: a Flight server answering `info` like a worker became a task's home, received window
    0's documents, then killed the task with a TypeError on its status reply."""
    import pyarrow.flight as flight

    from quail.worker.client import WorkerLost

    heard: list[dict] = []

    class Squatter(flight.FlightServerBase):
        def list_actions(self, context):
            return [("info", "")]

        def do_action(self, context, action):
            return [json.dumps({"model": "smollm2-135m", "memory": None}).encode()]

    class Listen(flight.ServerMiddlewareFactory):
        def start_call(self, info, headers):
            heard.append(dict(headers))

    squatter = Squatter(f"grpc://127.0.0.1:{_port()}", middleware={"listen": Listen()})
    try:
        with pytest.raises(WorkerLost, match="did not prove it holds the connection's token"):
            WorkerClient(f"grpc://127.0.0.1:{squatter.port}", TOKEN, timeout=10).info()
        assert heard and not any("authorization" in h for h in heard)
        proven = WorkerClient(f"grpc://127.0.0.1:{squatter.port}", TOKEN, timeout=10)
        proven.proven = True  # as if it had proved: a reply of the wrong shape is a lost worker, not a KeyError
        with pytest.raises(WorkerLost, match="replied to 'info' as no Quail worker does"):
            proven.info()
    finally:
        squatter.shutdown()
