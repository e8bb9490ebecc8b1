"""Where Quail keeps state that outlives a process: models, calibrations, observed selectivities."""

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("QUAIL_HOME", Path.home() / ".cache" / "quail"))
