"""The Quail page in the Airflow UI, registered through the `airflow.plugins` entry point: an app at
/quail (airflow_quail.plugins.app), a nav entry that renders it inside the UI, and a view per DAG
run."""

from typing import Any

from airflow.plugins_manager import AirflowPlugin


class QuailPlugin(AirflowPlugin):
    name = "quail"

    # A property, so that only the api-server, which reads it, imports the app; Airflow declares a list.
    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_quail.plugins.app import app

        return [{"app": app, "url_prefix": "/quail", "name": "Quail"}]

    external_views = [
        {"name": "Quail", "href": "/quail/", "url_route": "quail", "destination": "nav", "category": "browse"},
        {"name": "Quail", "href": "/quail/runs/{DAG_ID}/{RUN_ID}", "url_route": "quail_run",
         "destination": "dag_run"},
    ]
