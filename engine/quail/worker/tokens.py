"""Every worker has a token. One given to it (`--token-file`, or $QUAIL_WORKER_TOKEN in its
environment) is used as is; otherwise it makes a random one and writes it where its own user, and
only that user, finds it: beside its Unix socket, or under $QUAIL_HOME/worker for a TCP port.
`quail worker status`, the hook and the Quail page read it from there."""

import hashlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path

from quail.errors import QuailError
from quail.paths import home
from quail.trust import owned_file, private_folder, secret_file
from quail.worker.locations import socket_path

CHALLENGE = "quail-challenge"  # the header of a client's nonce, which the worker's "prove" action answers


def proof(token: str, challenge: str) -> str:
    """What only a holder of `token` answers to `challenge`: a worker proves it holds the connection's
    token before the client sends the token or any document (a squatter on a listed port cannot)."""
    return hmac.new(token.encode(), b"quail worker proof\x1f" + challenge.encode(), hashlib.sha256).hexdigest()


def beside(location: str, suffix: str) -> Path:
    """Where a worker keeps a file of its own (its token, its pid): beside its Unix socket, or
    under $QUAIL_HOME/worker for a TCP port."""
    if (sock := socket_path(location)) is not None:
        return sock.with_suffix(suffix)
    where = re.sub(r"[^A-Za-z0-9.-]+", "_", location.split("://", 1)[-1])
    return private_folder(home() / "worker") / f"{where}{suffix}"


def token_path(location: str) -> Path:
    return beside(location, ".token")


def read_token(location: str) -> str | None:
    """The token a worker at `location` wrote for its user, if there is one; a token file that
    another user owns or can read or write is refused (it could be a planted one, sending this
    user's clients to someone else's worker)."""
    path = token_path(location)
    if not owned_file(path, readable_by_others=False):
        return None
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)


def check_token_path(location: str) -> Path:
    """The token file's path, if what lies there may be replaced: nothing, or a token an earlier
    worker of this user wrote; anything else is refused, never removed."""
    path = token_path(location)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return path
    if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_size <= 64
            and TOKEN.fullmatch(path.read_text(errors="replace").strip())):
        raise QuailError(f"token file {path} exists and is not a token this user's worker wrote; it is left "
                         f"as it is: move it, or choose another socket or port")
    return path


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_token(location: str, token: str) -> None:
    """Writes the worker's token where its user's clients read it (0600, replacing an earlier
    worker's). Called once the worker listens, so a worker that cannot listen leaves the live
    one's token as it is."""
    path = check_token_path(location)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)


def token_from_file(path: str) -> str:
    """`--token-file`: a file only its owner can read (a token on the command line shows in `ps`)."""
    return secret_file(path, "token_file")
