"""What a key holds: `width` probabilities (1 for a yes/no, a classify's labels), a written output
(WRITTEN) or a row's vector (VECTOR). A stored value is used only when it is signed with this
process's key (signing.py) and is an answer of the width asked; the rest are counted (`Rejected`),
logged, and computed again."""

import logging
import math
from array import array
from pathlib import Path

from quail.store.signing import Signer

log = logging.getLogger(__name__)

WRITTEN = 0  # the width of a written output (an extract's, a map's): truncated or not (1 or 0), then its tokens
VECTOR = -1  # the width of a row's vector (a join's candidates): finite numbers, as many as the model's hidden size


class Rejected:
    """Stored values not used since the store was opened: `unsigned` (their signature is not this
    process's secret: planted, or stored by a worker with another secret), `damaged` (signed, yet
    not an answer: never by a worker of this Quail)."""

    def __init__(self) -> None:
        self.unsigned = 0
        self.damaged = 0

    def checked(self, signed_by: Signer | None, key: bytes, stored: object, width: int) -> list[float] | None:
        """The answer a stored value holds, or None, counted, where it holds none."""
        value = signed_by.open(key, stored) if signed_by is not None and isinstance(stored, bytes) else None
        if value is None:
            self.unsigned += 1
            return None
        if (answer := as_answer(value, width)) is None:
            self.damaged += 1
        return answer

    def add(self, seen: "Rejected", where: str | Path, width: int) -> None:
        """Counts a lookup's rejections in the store's, and logs them."""
        self.unsigned += seen.unsigned
        self.damaged += seen.damaged
        if seen.unsigned:
            log.warning("the answer store %s holds %d value(s) not signed with this process's key (planted, or "
                        "stored by a worker with another QUAIL_ANSWER_STORE_KEY): computed again", where,
                        seen.unsigned)
        if seen.damaged:
            log.warning("the answer store %s holds %d value(s) that are not answers (of %s): computed again",
                        where, seen.damaged, answer_words(width))

    def stats(self, signed_by: Signer | None) -> dict:
        return {"key": signed_by.fingerprint if signed_by else None, "rejected_unsigned": self.unsigned,
                "rejected_damaged": self.damaged}


def as_answer(value: object, width: int) -> list[float] | None:
    """A stored value as `width` probabilities, or as a written output (`WRITTEN`), or None if it
    is not one (damaged or planted)."""
    if not isinstance(value, bytes) or not value or len(value) % 8 or (width > 0 and len(value) != 8 * width):
        return None
    answer = array("d", value).tolist()
    if width == VECTOR:
        return answer if all(math.isfinite(x) for x in answer) else None
    if width == WRITTEN:
        ok = answer[0] in (0.0, 1.0) and all(t.is_integer() and 0 <= t < 1 << 31 for t in answer[1:])
        return answer if ok else None
    return answer if all(0.0 <= p <= 1.0 for p in answer) else None  # NaN is neither


def fits(answer: list[float], width: int) -> bool:
    """Whether a stored answer is of this width (any written output is of WRITTEN's)."""
    return len(answer) == width or (width in (WRITTEN, VECTOR) and len(answer) >= 1)


def answer_words(width: int) -> str:
    return {WRITTEN: "written outputs", VECTOR: "vectors"}.get(width, f"{width} probabilities in [0, 1]")


def sealed(signed_by: Signer, key: bytes, answer: list) -> bytes:
    """An answer as stored: its doubles, signed."""
    return signed_by.seal(key, array("d", answer).tobytes())
