"""Write-then-rename, the one way Quail writes a file that others read: into a unique temporary file
beside the target, renamed onto it only when complete, removed on any error. Readers see the old
file or the new one, never a part; two writers never share a temporary name."""

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """A temporary path to write; it replaces `path` when the block ends without an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> None:
    with replaced_atomically(path) as tmp:
        tmp.write_text(text)
