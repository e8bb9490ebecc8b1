"""cli/common.py: the parser whose errors read as Quail's, the argparse types, and starting the
engine on the device options."""

import argparse

import pytest

from quail.cli.common import Parser, at_least, device_options, host, open_session, seconds, start_engine
from quail.errors import QuailError


def test_errors_read_as_quails_own(capsys):
    p = Parser(prog="quail", parents=[device_options()])
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--threads", "0"])
    assert e.value.code == 2 and capsys.readouterr().err.endswith(
        "quail: error: --threads must be at least 1, got 0\n")


def test_at_least_takes_whole_numbers_within_its_bounds():
    assert at_least(1)("1") == 1 and at_least(1, 9)("9") == 9
    for text, says in (("0", "must be at least 1, got 0"), ("10", "must be at most 9, got 10"),
                       ("1.5", "must be a whole number, got '1.5'")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            at_least(1, 9)(text)


def test_host_takes_addresses_and_names():
    for text in ("127.0.0.1", "::1", "gpu0", "gpu0.example.com."):
        assert host(text) == text
    for text in ("", "bad host!", "-x", "a" * 64, "a." * 127 + "b"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a host name or an IP address"):
            host(text)


def test_seconds_are_finite_and_above_zero():
    assert seconds("0.5") == 0.5 and seconds("3600") == 3600.0
    for text, says in (("0", "above 0, got 0"), ("-1", "above 0, got -1"), ("inf", "above 0, got inf"),
                       ("nan", "above 0, got nan"), ("soon", "must be a number of seconds, got 'soon'")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            seconds(text)


def test_start_engine_refuses_an_install_without_the_engine(monkeypatch):
    monkeypatch.setattr("quail.installed.ENGINE", ("quail_no_such_module",))
    with pytest.raises(QuailError, match="`quail x` runs the model, and this install has no engine "
                                         r"\(quail_no_such_module missing\): install airflow-quail\[worker\]"):
        start_engine(argparse.Namespace(threads=1), "`quail x`")


def test_start_engine_gives_torch_the_threads_asked_for():
    import torch

    before = torch.get_num_threads()
    try:
        start_engine(argparse.Namespace(threads=2), "`quail x`")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_session_opens_on_the_device_options(monkeypatch):
    opened = []
    monkeypatch.setattr("quail.session.Session.open", lambda *a: opened.append(a))
    args = device_options().parse_args(["--dtype", "float32", "--device", "cpu", "--arena-pages", "64",
                                        "--max-batch-tokens", "512", "--gpu-memory-utilization", "0.5"])
    say = print
    open_session("smollm2-135m", args, say)
    assert opened == [("smollm2-135m", "float32", 64, 512, "cpu", 0.5, say)]
