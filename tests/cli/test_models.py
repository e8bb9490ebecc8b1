"""cli/models.py: `quail models list|pull|prune`."""

import pytest

from quail.cli.main import main
from quail.model.registry import DEFAULT_MODEL, EMBEDDED
from tests.cli.test_bad_input import refused


def test_list_names_each_embedded_model_whether_installed_and_the_default(capsys, monkeypatch):
    monkeypatch.setattr("quail.cli.models.installed", lambda name: name == "smollm2-135m")
    monkeypatch.setenv("QUAIL_CONVERTED_WEIGHTS", "off")  # no converted weights to list (tests/model/test_converted.py)
    with pytest.raises(SystemExit) as e:
        main(["models", "list"])
    lines = capsys.readouterr().out.splitlines()
    assert e.value.code == 0 and [line.split("\t")[0] for line in lines] == list(EMBEDDED)
    for name, line in zip(EMBEDDED, lines):
        mark = "installed" if name == "smollm2-135m" else "not installed"
        assert line == f"{name}\t{mark}" + ("  (default)" if name == DEFAULT_MODEL else "")


def test_pull_installs_the_model_named(capsys, monkeypatch):
    pulled = []
    monkeypatch.setattr("quail.cli.models.pull", pulled.append)
    with pytest.raises(SystemExit) as e:
        main(["models", "pull", "smollm2-135m"])
    assert e.value.code == 0 and pulled == ["smollm2-135m"]


def test_pull_takes_one_embedded_name_and_list_none(capsys, monkeypatch):
    monkeypatch.setattr("quail.cli.models.pull", lambda name: pytest.fail("pulled"))
    refused(capsys, "models", "pull", says="the following arguments are required: name")
    refused(capsys, "models", "pull", "gpt-5", says="name invalid choice: 'gpt-5'")
    refused(capsys, "models", "list", "smollm2-135m", says="unrecognized arguments: smollm2-135m")
    refused(capsys, "models", says="the following arguments are required: action")
