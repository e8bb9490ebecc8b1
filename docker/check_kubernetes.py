"""Validates a deploy/kubernetes folder offline, for `make docker-check`.

Every manifest kustomization.yaml lists is checked strictly (unknown fields refused) against the
Kubernetes schemas kubernetes-validate bundles, for 1.30 (the oldest these manifests claim) and
1.37 (the newest it bundles); a kind or apiVersion with no schema fails too, where the tool itself
only warns. Each workload must also keep the hardening `check_hardening` names. airflow-values.yaml
is parsed as YAML, and checked against the Airflow chart's
values.schema.json when $AIRFLOW_CHART_SCHEMA names one: the chart, which `helm lint` and
`helm template` need as well, comes from its Helm repository, out of reach offline.

    python docker/check_kubernetes.py deploy/kubernetes
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

import yaml

KUBERNETES_VERSIONS = ("1.30", "1.37")
NOT_MANIFESTS = {"kustomization.yaml", "airflow-values.yaml"}


def manifests(folder: Path) -> tuple[list[Path], list[str]]:
    """The files kustomization.yaml lists, and an error for each YAML file beside them that it does
    not (`kubectl apply -k` would leave that one out)."""
    listed = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    errors = [f"{path}: not listed in kustomization.yaml's resources" for path in sorted(folder.glob("*.yaml"))
              if path.name not in NOT_MANIFESTS | set(listed)]
    return [folder / name for name in listed], errors


def check_manifest(path: Path) -> list[str]:
    from kubernetes_validate import SchemaNotFoundError, ValidationError, validate

    errors = []
    for resource in filter(None, yaml.safe_load_all(path.read_text())):
        name = f"{resource.get('kind')}/{resource.get('metadata', {}).get('name')}"
        for version in KUBERNETES_VERSIONS:
            try:
                validate(resource, version, strict=True)
            except ValidationError as e:
                where = ".".join(map(str, e.path)) or "(top)"
                errors.append(f"{path}: {name}, Kubernetes {version}: {where}: {e.message}")
            except SchemaNotFoundError as e:
                errors.append(f"{path}: {name}: {e.message}")
            except KeyError as e:
                errors.append(f"{path}: {name}: no {e.args[0]}")
                break
    return errors


def check_hardening(files: list[Path]) -> list[str]:
    """What every workload here must keep: no service account token mounted; each container with
    a read-only root filesystem, no privilege escalation, every capability dropped, CPU and memory
    limits, and an image of a fixed tag or digest (not `latest`); and a NetworkPolicy that selects
    its pods."""
    resources = [(path, r) for path in files for r in filter(None, yaml.safe_load_all(path.read_text()))]
    policies = [r["spec"].get("podSelector", {}).get("matchLabels", {}) for _, r in resources
                if r.get("kind") == "NetworkPolicy"]
    errors = []
    for path, r in resources:
        pod = r.get("spec", {}).get("template", {})
        if "spec" not in pod:
            continue
        name = f"{path}: {r['kind']}/{r['metadata']['name']}"
        labels = pod.get("metadata", {}).get("labels", {})
        if pod["spec"].get("automountServiceAccountToken") is not False:
            errors.append(f"{name}: automountServiceAccountToken is not false")
        if not any(selector.items() <= labels.items() for selector in policies):
            errors.append(f"{name}: no NetworkPolicy selects its pods")
        for c in pod["spec"].get("initContainers", []) + pod["spec"].get("containers", []):
            security, limits = c.get("securityContext", {}), c.get("resources", {}).get("limits", {})
            wanted = {"readOnlyRootFilesystem": security.get("readOnlyRootFilesystem") is True,
                      "allowPrivilegeEscalation: false": security.get("allowPrivilegeEscalation") is False,
                      "capabilities dropped": security.get("capabilities", {}).get("drop") == ["ALL"],
                      "a CPU limit": "cpu" in limits, "a memory limit": "memory" in limits,
                      "a fixed image tag": "@sha256:" in c["image"] or c["image"].rpartition(":")[2] not in
                      ("", "latest") and ":" in c["image"].rpartition("/")[2]}
            errors += [f"{name}: container {c['name']} lacks {what}" for what, ok in wanted.items() if not ok]
    return errors


def check_scrape(files: list[Path]) -> list[str]:
    """Each workload that serves metrics (`--metrics-port N` among its container's args) names the
    port N in its pod's prometheus.io annotations, with the scheme https where it serves TLS
    (`--tls-cert`), declares it as a container port, and has a NetworkPolicy rule admitting it."""
    resources = [r for path in files for r in filter(None, yaml.safe_load_all(path.read_text()))]
    admitted = {p.get("port") for r in resources if r.get("kind") == "NetworkPolicy"
                for rule in r["spec"].get("ingress", []) for p in rule.get("ports", [])}
    errors = []
    for r in resources:
        pod = r.get("spec", {}).get("template", {})
        for c in pod.get("spec", {}).get("containers", []):
            args = [*c.get("command", []), *c.get("args", [])]
            if "--metrics-port" not in args:
                continue
            port = int(args[args.index("--metrics-port") + 1])
            name = f"{r['kind']}/{r['metadata']['name']}: container {c['name']}"
            notes = pod.get("metadata", {}).get("annotations", {})
            wanted = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                      "prometheus.io/scheme": "https" if "--tls-cert" in args else "http"}
            errors += [f"{name}: serves metrics on {port}, and its pod's annotation {k} is "
                       f"{notes.get(k)!r}, not {v!r}" for k, v in wanted.items() if notes.get(k) != v]
            if port not in {p.get("containerPort") for p in c.get("ports", [])}:
                errors.append(f"{name}: serves metrics on {port}, which is not among its ports")
            if port not in admitted:
                errors.append(f"{name}: serves metrics on {port}, which no NetworkPolicy admits")
    return errors


PRIVATE = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}  # at least these kept out


def check_policies(files: list[Path]) -> list[str]:
    """What no NetworkPolicy here may allow: a peer in every namespace (`namespaceSelector: {}`), a
    rule with no peers (anyone), or egress to any address beyond DNS and public HTTPS (an ipBlock
    that keeps the private and link-local ranges out, on port 443 only)."""
    errors = []
    for path in files:
        for r in filter(None, yaml.safe_load_all(path.read_text())):
            if r.get("kind") != "NetworkPolicy":
                continue
            name = f"{path}: NetworkPolicy/{r['metadata']['name']}"
            for way, peers_key in (("ingress", "from"), ("egress", "to")):
                for i, rule in enumerate(r["spec"].get(way, [])):
                    where = f"{name}: {way}[{i}]"
                    ports = {p.get("port") for p in rule.get("ports", [])}
                    peers = rule.get(peers_key)
                    if not peers:
                        if way == "ingress" or ports - {53}:
                            errors.append(f"{where} admits any address{'' if ports else ' on any port'}")
                        continue
                    for peer in peers:
                        if peer.get("namespaceSelector") == {}:
                            errors.append(f"{where}: namespaceSelector {{}} admits every namespace")
                        if (block := peer.get("ipBlock")) is not None and (
                                ports != {443} or not PRIVATE <= set(block.get("except", []))):
                            errors.append(f"{where}: ipBlock {block.get('cidr')} reaches private addresses or "
                                          f"ports other than 443")
    return errors


def check_values(path: Path) -> list[str]:
    values = yaml.safe_load(path.read_text())
    if not isinstance(values, dict):
        return [f"{path}: not a mapping of chart values"]
    if not (schema_path := os.environ.get("AIRFLOW_CHART_SCHEMA")):
        return []
    import jsonschema

    schema = json.loads(Path(schema_path).read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{path}: {'.'.join(map(str, e.path)) or '(top)'}: {e.message} (chart schema {schema_path})"
            for e in validator.iter_errors(values)]


def main(folder: Path) -> int:
    if importlib.util.find_spec("kubernetes_validate") is None:
        print("docker-check: kubernetes-validate is missing: pip install kubernetes-validate", file=sys.stderr)
        return 2
    files, errors = [], []
    try:
        files, errors = manifests(folder)
    except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
        errors.append(f"{folder / 'kustomization.yaml'}: no list of resources ({e})")
    checks = [(path, check_manifest) for path in files] + [(folder / "airflow-values.yaml", check_values)]
    for path, check in checks:
        try:
            errors += check(path)
        except (OSError, yaml.YAMLError) as e:
            errors.append(f"{path}: {e}")
    try:
        errors += check_hardening(files) + check_policies(files) + check_scrape(files)
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as e:
        errors.append(f"{folder}: the manifests' hardening cannot be read ({e})")
    for error in errors:
        print(f"docker-check: {error}", file=sys.stderr)
    if errors:
        return 1
    chart = "and the chart's schema" if os.environ.get("AIRFLOW_CHART_SCHEMA") else \
        "only (no chart schema offline: set AIRFLOW_CHART_SCHEMA; helm lint not run)"
    print(f"docker-check: {', '.join(p.name for p in files)} valid (strict, Kubernetes "
          f"{' and '.join(KUBERNETES_VERSIONS)}); airflow-values.yaml valid as YAML {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/kubernetes")))
