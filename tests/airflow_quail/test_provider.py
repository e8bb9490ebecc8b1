"""Provider registration, and a provider face that loads no torch."""

import subprocess
import sys

from airflow_quail import get_provider_info


def test_provider_info_declares_the_connection_type():
    info = get_provider_info()
    [conn] = info["connection-types"]
    assert conn["connection-type"] == "quail" and conn["hook-class-name"] == "airflow_quail.hooks.quail.QuailHook"
    assert set(conn["conn-fields"]) == {"model", "dtype", "device", "arena_pages"}
    assert conn["ui-field-behaviour"]["relabeling"]["password"] == "Token"
    from importlib.metadata import entry_points

    [ep] = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_quail")]
    assert ep.load()() == info


def test_parsing_a_dag_imports_no_torch():
    """The dag-processor and every task process import the provider: the operators, hook, trigger
    and planning name the engine's types without loading the engine."""
    code = ("import sys, airflow_quail.operators, airflow_quail.hooks.quail, airflow_quail.triggers.quail, "
            "airflow_quail.planning; print(sorted(m for m in ('torch', 'quail.executor.engine', 'quail.kv') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
