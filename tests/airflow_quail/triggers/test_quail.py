"""QuailJobTrigger: what the triggerer stores and rebuilds."""


def test_the_trigger_serializes_to_itself():
    import importlib

    from airflow_quail.triggers.quail import QuailJobTrigger

    path, kwargs = QuailJobTrigger("job-1", "quail_gpu", 1.5).serialize()
    module, name = path.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs) and kwargs["job_id"] == "job-1"
