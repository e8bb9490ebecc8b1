"""Stored answers are signed by the processes that computed them: an HMAC over the answer's key and
its value, with a secret the workers hold and the database does not. Whoever can write the store's
table (a database role every DAG's code can reach, a copied SQLite file) can delete answers but not
plant one: a value whose signature fails is a miss, computed again, counted and logged. The key is in
the signature, so a valid value moved to another key fails too.

The secret: $QUAIL_ANSWER_STORE_KEY, else the file $QUAIL_ANSWER_STORE_KEY_FILE names (a Kubernetes
Secret's, readable by its owner alone), else, for a SQLite store, answer-store.key in Quail's home, made at first
use. A pool's workers share one answer store on PostgreSQL and so must share one secret, which must be
given; a worker with another one finds none of their answers, and says so."""

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from quail.errors import QuailError
from quail.paths import home
from quail.trust import owned_file, secret_file

MAC_BYTES = 16  # HMAC-SHA256 cut to 128 bits, as RFC 4868 allows
MIN_SECRET = 16  # characters of a secret given by the user
KEY_FILE = "answer-store.key"


class Signer:
    def __init__(self, secret: bytes) -> None:
        self._secret = hashlib.sha256(secret).digest()
        # what messages and `quail answers stats` show, so that two workers' secrets can be compared
        self.fingerprint = hashlib.sha256(b"quail answer-store key\x1f" + self._secret).hexdigest()[:12]

    def seal(self, key: bytes, value: bytes) -> bytes:
        """The value as stored: itself, then its signature."""
        return value + self._mac(key, value)

    def open(self, key: bytes, stored: bytes) -> bytes | None:
        """The value stored under `key`, or None when its signature is not this secret's."""
        if len(stored) <= MAC_BYTES:
            return None
        value, mac = stored[:-MAC_BYTES], stored[-MAC_BYTES:]
        return value if hmac.compare_digest(mac, self._mac(key, value)) else None

    def _mac(self, key: bytes, value: bytes) -> bytes:
        return hmac.new(self._secret, len(key).to_bytes(2, "big") + key + value, hashlib.sha256).digest()[:MAC_BYTES]


def signer(shared: str | None = None) -> Signer:
    """The signer of this process's answers (the module's docstring says where its secret comes from).
    shared: the store, where it is one that other hosts' workers share, which a secret of this home's
    alone would split: its key must be given."""
    if given := os.environ.get("QUAIL_ANSWER_STORE_KEY"):
        return Signer(_checked(given, "QUAIL_ANSWER_STORE_KEY"))
    if path := os.environ.get("QUAIL_ANSWER_STORE_KEY_FILE"):
        key = secret_file(path, "QUAIL_ANSWER_STORE_KEY_FILE", variable=True)
        return Signer(_checked(key, "QUAIL_ANSWER_STORE_KEY_FILE"))
    if shared:
        raise QuailError(f"the answer store {shared} is shared: give the workers that share it one key to sign its "
                         f"answers with, in a file only its owner can read named by QUAIL_ANSWER_STORE_KEY_FILE (or "
                         f"in QUAIL_ANSWER_STORE_KEY), and keep it from the database's users")
    return Signer(_own_secret(home() / KEY_FILE))


def _checked(secret: str, where: str) -> bytes:
    if len(secret) < MIN_SECRET:
        raise QuailError(f"{where} holds {len(secret)} characters: an answer store's key needs at least {MIN_SECRET} "
                         f"(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return secret.encode()


def _own_secret(path: Path) -> bytes:
    """The secret in `path`, made (32 random bytes, 0600) if there is none; two processes making it
    at once end with the same one, since a file is linked into place only where none is."""
    if not owned_file(path, readable_by_others=False, kind="answer store key"):
        made = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            os.link(made, path)
        except FileExistsError:
            pass
        finally:
            made.unlink(missing_ok=True)
        owned_file(path, readable_by_others=False, kind="answer store key")
    secret = path.read_bytes().strip()
    if len(secret) < MIN_SECRET:
        raise QuailError(f"answer store key {path} holds {len(secret)} bytes: remove it, and Quail makes another")
    return secret
