"""Apache Airflow provider for Quail: LLM filter, classify, join, extract and map operators on a Quail worker."""

from quail.constants import DEVICE_HELP
from quail.model.registry import DTYPE_CHOICES

__version__ = "0.1.0"


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-quail",
        "name": "Quail",
        "description": "LLM filter, classify, join, extract and map over tables, on a worker that plans KV reuse.",
        "versions": [__version__],
        "connection-types": [
            {
                "connection-type": "quail",
                "hook-class-name": "airflow_quail.hooks.quail.QuailHook",
                "hook-name": "Quail",
                "conn-fields": {
                    "model": {"label": "Model", "schema": {"type": ["string", "null"]},
                              "description": "An embedded model name, a .gguf file or a HF directory (local worker)"},
                    "dtype": {"label": "Dtype", "schema": {"type": ["string", "null"], "enum": [*DTYPE_CHOICES, None]}},
                    "device": {"label": "Device", "schema": {"type": ["string", "null"]},
                               "description": f"{DEVICE_HELP} (local worker); two GPUs: two workers"},
                    "arena_pages": {"label": "Arena pages", "schema": {"type": ["integer", "null"]}},
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "extra"],
                    "relabeling": {"host": "Worker host (empty: a local worker started on demand)",
                                   "password": "Token"},
                },
            }
        ],
        "hooks": [{"integration-name": "Quail", "python-modules": ["airflow_quail.hooks.quail"]}],
        "operators": [{"integration-name": "Quail", "python-modules": ["airflow_quail.operators"]}],
        "triggers": [{"integration-name": "Quail", "python-modules": ["airflow_quail.triggers.quail"]}],
    }
