"""An answer's key: a digest of the model's identity (its weights' digest, dtype, device kind and
attention), the question's identity (the kind and the prompt's tokens after the document) and the
document's tokens. No text is kept: a key names what was asked, and cannot be read back."""

import functools
import hashlib
from array import array


def answer_key(model: str, question: str, document: list[int]) -> bytes:
    """model: LoadedModel.identity; question: the kind and the prompt after the document; the
    document's token ids (a join's pair: -1 between its two rows)."""
    h = _asked(model, question).copy()
    h.update(array("i", document).tobytes())
    return h.digest()


@functools.lru_cache(maxsize=64)
def _asked(model: str, question: str):
    """The key's hash with its model and question in, copied for each document: a window asks one
    question of thousands."""
    return hashlib.sha256(f"{model}\x1f{question}\x1f".encode())
