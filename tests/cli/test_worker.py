"""cli/worker.py: `quail worker serve|status|stop`, each a subcommand with its own flags; the
command lines that the local worker's starter, the images and the tests build; and the settings
refused before the model loads or any worker is asked."""

import subprocess
import sys
from pathlib import Path

import pytest

from quail.cli.main import main, parser
from tests.cli.test_bad_input import MODEL, refused


@pytest.mark.parametrize("flags, says", [
    (["--ttl", "0"], "--ttl must be a number of seconds above 0, got 0"),
    (["--ttl", "-5"], "--ttl must be a number of seconds above 0, got -5"),
    (["--idle-timeout", "-1"], "--idle-timeout must be a number of seconds above 0, got -1"),
    (["--idle-timeout", "inf"], "--idle-timeout must be a number of seconds above 0, got inf"),
    (["--port", "0"], "--port must be at least 1, got 0"),
    (["--port", "99999"], "--port must be at most 65535, got 99999"),
])
def test_worker_settings_that_cannot_work_are_refused_before_the_model_loads(capsys, flags, says):
    refused(capsys, "worker", "serve", *MODEL, *flags, says=says)


def test_a_metrics_port_already_taken_is_refused_before_the_model_loads(capsys, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused(capsys, "worker", "serve", *MODEL, "--socket", str(tmp_path / "w.sock"), "--metrics-port", str(port),
                says=f"--metrics-port: cannot serve metrics on 127.0.0.1:{port}: Address already in use")
    assert not list(tmp_path.iterdir())  # no pid file, no socket left behind


@pytest.mark.parametrize("flags, says", [
    (["--host", ""], "--host must be a host name or an IP address, got ''"),
    (["--host", "bad host!"], "--host must be a host name or an IP address, got 'bad host!'"),
])
def test_a_host_that_is_no_host_is_refused(capsys, flags, says):
    refused(capsys, "worker", "serve", *MODEL, *flags, says=says)
    refused(capsys, "worker", "status", *flags, says=says)


@pytest.mark.parametrize("location", ["http://x", "grpc://x:99999", "grpc://:8815", "grpc+unix://",
                                      "grpc://[::1"])  # #48 17: "Invalid IPv6 URL" was a traceback
def test_a_worker_location_flight_cannot_dial_is_refused_naming_the_forms(capsys, location):
    refused(capsys, "worker", "status", "--all", "--worker", location,
            says=f"worker location {location!r}: give grpc://HOST:PORT, grpc+tls://HOST:PORT or grpc+unix://PATH")


@pytest.mark.parametrize("argv", [
    ["serve", "--tls-ca", "ca.pem"], ["serve", "--all"], ["serve", "--worker", "grpc://h:1"],
    ["status", "--model", "smollm2-135m"], ["status", "--tls-cert", "c.pem"], ["status", "--ttl", "5"],
    ["status", "--threads", "2"], ["status", "--answer-store", "a.sqlite"],
    ["stop", "--socket", "w.sock"], ["stop", "--model", "smollm2-135m"], ["stop", "--all"],
])
def test_each_subcommand_takes_its_own_flags_only(capsys, argv):
    refused(capsys, "worker", *argv, says=f"unrecognized arguments: {' '.join(argv[1:])}")


def test_the_subcommands_are_named_and_each_has_its_help(capsys):
    refused(capsys, "worker", says="the following arguments are required: action")
    refused(capsys, "worker", "restart",
            says="action invalid choice: 'restart' (choose from 'serve', 'status', 'stop')")
    for action, says in (("serve", "--tls-key PEM"), ("status", "--tls-ca PEM"), ("stop", "started on demand")):
        with pytest.raises(SystemExit) as e:
            main(["worker", action, "--help"])
        out = capsys.readouterr().out
        assert e.value.code == 0 and out.startswith(f"usage: quail worker {action}") and says in out, out


@pytest.mark.parametrize("argv, expected", [
    # docker/worker/entrypoint.sh, its HEALTHCHECK, and docker-compose's
    (["serve", "--host", "0.0.0.0", "--port", "8815", "--model", "smollm2-135m", "--device", "cpu"],
     {"host": "0.0.0.0", "port": 8815, "device": "cpu"}),
    (["status", "--host", "127.0.0.1", "--port", "8815"], {"host": "127.0.0.1", "port": 8815}),
    # tests/airflow_quail/conftest.py's pool and bench/e2e/pool.py
    (["serve", "--model", "smollm2-135m", "--dtype", "float32", "--port", "9001", "--token-file", "t",
      "--arena-pages", "1024", "--threads", "1", "--no-answer-store"],
     {"dtype": "float32", "port": 9001, "token_file": "t", "arena_pages": 1024, "threads": 1, "no_answer_store": True}),
    # tests/worker/test_worker.py and tests/airflow_quail/system/test_several_workers.py
    (["status", "--socket", "w.sock"], {"socket": "w.sock", "all": False}),
    (["status", "--all", "--token-file", "t", "--worker", "grpc://a:1", "--worker", "grpc://b:2"],
     {"all": True, "token_file": "t", "worker": ["grpc://a:1", "grpc://b:2"]}),
    (["stop"], {}),
])
def test_the_command_lines_that_callers_build_are_taken(argv, expected):
    args = parser().parse_args(["worker", *argv])
    assert (args.command, args.action) == ("worker", argv[0]) and callable(args.func)
    assert {k: getattr(args, k) for k in expected} == expected


def test_the_local_workers_command_line_is_taken(monkeypatch, tmp_path):
    """quail.worker.local starts `quail worker serve` for a task with no worker named."""
    from quail.worker import local

    started = []
    monkeypatch.setattr(local.subprocess, "Popen", lambda argv, **kw: started.append(argv))
    local._start("smollm2-135m", "float32", 512, "cpu", 600.0, tmp_path / "w.sock", "t0k", tmp_path / "w.log",
                 lambda _: None)
    [argv] = started
    assert argv[:3] == [sys.executable, "-m", "quail.cli"]
    args = parser().parse_args(argv[3:])
    assert (args.action, args.model, args.dtype, args.device, args.socket, args.idle_timeout, args.arena_pages) == \
        ("serve", "smollm2-135m", "float32", "cpu", str(tmp_path / "w.sock"), 600.0, 512)


def test_status_refuses_what_cannot_work_before_asking_any_worker(capsys, tmp_path):
    refused(capsys, "worker", "status", "--worker", "grpc://a:1", says="--worker is for `quail worker status --all`")
    refused(capsys, "worker", "status", "--socket", tmp_path / "w.sock", "--tls-ca", "ca.pem",
            says="TLS is for a TCP worker (--host, --port); a Unix socket admits its owner only")
    refused(capsys, "worker", "status", "--socket", tmp_path / "w.sock",
            says=f"no Quail worker answers at grpc+unix://{tmp_path / 'w.sock'}")


def test_serve_refuses_tls_on_a_socket_before_the_model_loads(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("quail.cli.worker.server_tls", lambda cert, key: (b"chain", b"key"))
    monkeypatch.setattr("quail.session.Session.open", lambda *a, **k: pytest.fail("the model loaded"))
    refused(capsys, "worker", "serve", "--socket", tmp_path / "w.sock", "--tls-cert", "c.pem", "--tls-key", "k.pem",
            says="TLS is for a TCP worker")


def test_stop_with_no_local_workers_stops_none(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as e:
        main(["worker", "stop"])
    assert e.value.code == 0 and capsys.readouterr().out == "stopped 0 local worker(s)\n"


def test_status_all_with_no_workers_lists_none_and_one_that_does_not_answer(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as e:
        main(["worker", "status", "--all", "--worker", f"grpc+unix://{tmp_path}/none.sock"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"grpc+unix://{tmp_path}/none.sock  does not answer: "), out
    assert len(out.splitlines()) == 1


def test_python_m_quail_cli_runs_a_subcommand(tmp_path):
    out = subprocess.run([sys.executable, "-m", "quail.cli", "worker", "stop", "--socket", "x"], capture_output=True,
                         text=True, cwd=Path(__file__).parents[2])
    assert out.returncode == 2 and "quail: error: unrecognized arguments: --socket x" in out.stderr, out.stderr
