"""The words a prompt uses that plans and front ends need too: what it calls its document, a join's
right row, and a classify's question when none is given."""

import re

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
