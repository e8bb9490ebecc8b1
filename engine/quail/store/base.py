"""The answer store as its callers see it, whichever the backend: the embedded SQLite file
(sqlite.py) or the PostgreSQL database a pool of workers shares (postgres.py). Both keep the same
keys (keys.py) and values (values.py), signed (signing.py), with the answers found lately in memory
(recent.py), bounded to `max_bytes` by forgetting the least recently used first."""

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from quail.errors import QuailError

DEFAULT_MAX_BYTES = 1 << 30


class Store(Protocol):
    backend: str  # "sqlite" or "postgres", as metrics label it

    @property
    def errors(self) -> int:
        """Calls that failed since it was opened (the run went on without it)."""

    @property
    def path(self) -> Path | str:
        """Where it is, as messages name it: never a password."""

    @property
    def writable(self) -> bool:
        """False once it cannot be written (read-only, full, of a newer schema): it is only read."""

    @property
    def unused(self) -> str | None:
        """Why it is not used at all (refused, unopenable, not Quail's), or None while it is."""

    def get(self, keys: list[bytes], width: int, touch: bool = True) -> dict[bytes, list]:
        """The stored answers among `keys`, each `width` probabilities (1 for a yes/no, a classify's
        labels) or a written output (WRITTEN). `touch`: they count as used now (for the bound)."""

    def put(self, items: Iterable[tuple[bytes, list]]) -> None: ...

    def size(self) -> int:
        """Bytes it takes on disk."""

    def stats(self) -> dict:
        """What `quail answers stats` shows: path, answers, bytes, max_bytes, writable, the key's
        fingerprint and the values rejected."""

    def clear(self) -> int:
        """Forgets every answer; how many there were."""

    def close(self) -> None: ...


def bound_bytes() -> int:
    """$QUAIL_ANSWER_STORE_MAX_BYTES, else 1 GiB."""
    value = os.environ.get("QUAIL_ANSWER_STORE_MAX_BYTES", "")
    if not value:
        return DEFAULT_MAX_BYTES
    if not (value.isascii() and value.isdigit()) or int(value) < 1 << 20:  # "²²²" is a digit to isdigit
        raise QuailError(f"QUAIL_ANSWER_STORE_MAX_BYTES={value!r}: give a number of bytes, at least 1048576")
    return int(value)
