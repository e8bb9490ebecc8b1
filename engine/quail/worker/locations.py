"""Worker locations, as Arrow Flight spells them: a Unix socket (grpc+unix://PATH) or a TCP port
(grpc://HOST:PORT)."""

from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.flight as flight

from quail.errors import QuailError


def unix_location(path: str | Path) -> str:
    try:
        return flight.Location.for_grpc_unix(str(path)).uri.decode()
    except pa.ArrowInvalid:
        raise QuailError(f"socket {path}: Flight cannot name this path (spaces and some other characters "
                         f"are not allowed); choose another") from None


def socket_path(location: str) -> Path | None:
    """The Unix socket a location names; None for a TCP one."""
    parts = urlsplit(location)
    return Path(parts.path) if parts.scheme == "grpc+unix" else None
