"""Where Quail keeps state that outlives a process: models, calibrations, observed selectivities,
the local workers' sockets and tokens, staged windows, stored answers."""

import os
from pathlib import Path

from quail.trust import private_folder


def home() -> Path:
    """$QUAIL_HOME (default ~/.cache/quail): a folder of this user's that no other user can write."""
    return private_folder(Path(os.environ.get("QUAIL_HOME", Path.home() / ".cache" / "quail")))
