"""The words a prompt uses that plans and front ends need too: what it calls its document, a join's
right row, and a classify's question when none is given."""

import re
import unicodedata
from collections.abc import Sequence

DEFAULT_QUESTION = "Which category does the document belong to?"  # classify without a question
ANCHOR = "document"  # what a prompt calls its document, a join's left row included: its KV is shared
SECOND = "second document"  # a join's right row, when nothing better names it


def partner_name(column: str | None) -> str:
    """What a join's prompt calls its right rows when the DAG names nothing: the right column's name
    in words ("short_description" or "shortDescription": "short description"), or "second document"
    where that would read as the left row's own label."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", column or "")
    words = " ".join(re.findall(r"[A-Za-z0-9]+", words)).lower()
    return words if words and words != ANCHOR else SECOND


# Unicode's bidirectional controls: a choice holding one shows its text in another order
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_choices(values: Sequence[str], what: str) -> None:
    """Choices (a classify's labels, an enum's values) that a reader tells apart as written: each
    visible, with no space around it and no control that hides or reorders its text, and no two
    that differ only in case, width or accents. (The same choice twice is the caller's to refuse.)"""
    seen: dict[str, str] = {}
    for i, value in enumerate(values, 1):
        if not any(unicodedata.category(c)[0] not in "ZC" for c in value):
            raise ValueError(f"{what} {i} is empty or invisible: {value!r}")
        if value != value.strip():
            raise ValueError(f"{what} {i} starts or ends with a space: {value!r}; give it without")
        if hidden := sorted({f"U+{ord(c):04X}" for c in value if c in BIDI or unicodedata.category(c) in ("Cc", "Cf")}):
            raise ValueError(f"{what} {i} holds invisible or reordering characters ({', '.join(hidden)}): {value!r}")
        if (other := seen.setdefault(_looks(value), value)) != value:
            raise ValueError(f"{what}s {other!r} and {value!r} look alike (they differ only in case, width or "
                             f"accents): a reader of the output cannot tell them apart; give distinct ones")


def _looks(text: str) -> str:
    """What a text looks like: compatibility forms folded, accents and case dropped."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
