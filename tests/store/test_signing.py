"""Stored values are signed: a value comes back only with the key it was stored under and the secret
that signed it; the secret is made once, privately, or given, and checked."""

import pytest

from quail.errors import QuailError
from quail.store.signing import MAC_BYTES, Signer, signer


def test_a_value_opens_only_under_its_key_and_with_its_secret():
    one = Signer(b"the secret of this worker")
    stored = one.seal(b"key", b"\x00" * 8)
    assert one.open(b"key", stored) == b"\x00" * 8
    assert one.open(b"another key", stored) is None  # moved to another key
    assert Signer(b"the secret of another worker").open(b"key", stored) is None
    assert one.open(b"key", stored[:-1] + bytes([stored[-1] ^ 1])) is None  # its signature changed
    assert one.open(b"key", b"\x01" + stored[1:]) is None  # its value changed
    assert one.open(b"key", stored[-MAC_BYTES:]) is None  # a signature alone holds no value
    assert len(stored) == 8 + MAC_BYTES


def test_the_key_is_made_once_private_and_a_given_one_is_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    first = signer().fingerprint
    assert signer().fingerprint == first
    assert (tmp_path / "home" / "answer-store.key").stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("QUAIL_ANSWER_STORE_KEY", "x" * 32)
    assert signer().fingerprint not in (first, Signer(b"y" * 32).fingerprint)
    monkeypatch.setenv("QUAIL_ANSWER_STORE_KEY", "short")
    with pytest.raises(QuailError, match="at least 16"):
        signer()
    monkeypatch.delenv("QUAIL_ANSWER_STORE_KEY")
    key = tmp_path / "key"
    key.write_text("z" * 32)
    key.chmod(0o644)
    monkeypatch.setenv("QUAIL_ANSWER_STORE_KEY_FILE", str(key))
    with pytest.raises(QuailError, match="open to other users"):
        signer()
    key.chmod(0o600)
    assert signer().fingerprint == Signer(b"z" * 32).fingerprint


def test_a_shared_store_is_never_signed_with_a_key_of_this_home_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QUAIL_ANSWER_STORE_KEY", raising=False)
    monkeypatch.delenv("QUAIL_ANSWER_STORE_KEY_FILE", raising=False)
    with pytest.raises(QuailError, match="the answer store postgresql://db:5432/quail is shared"):
        signer(shared="postgresql://db:5432/quail")
    assert not (tmp_path / "home" / "answer-store.key").exists()
    given = "the key the pool's workers share"
    monkeypatch.setenv("QUAIL_ANSWER_STORE_KEY", given)
    assert signer(shared="postgresql://db:5432/quail").fingerprint == Signer(given.encode()).fingerprint
