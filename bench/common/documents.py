"""Real documents of about 300 tokens that every Python install has: the Python language and
library reference topics that `help()` shows (pydoc_data.topics), cut at paragraph boundaries into
chunks of 250 to 300 tokens. Several topics repeat others' text; a chunk whose first paragraph was
already seen is dropped, so that no document is a copy or a near copy of another (which would
flatter prefix sharing). The same Python version gives the same documents."""

from pydoc_data.topics import topics


def reference_documents(n: int, tokenizer, low: int = 250, high: int = 300) -> list[str]:
    docs, openings = [], set()

    def add(chunk):
        if chunk[0] not in openings:
            openings.add(chunk[0])
            docs.append("\n\n".join(chunk))

    for name in sorted(topics):
        chunk, size = [], 0
        for para in (p.strip() for p in topics[name].split("\n\n")):
            tokens = len(tokenizer.encode(para + "\n\n")) if para else 0
            if size + tokens > high:
                if size >= low:
                    add(chunk)
                chunk, size = [], 0
                if tokens > high:  # a paragraph too long for any chunk (a grammar listing): skipped
                    continue
            if tokens:
                chunk.append(para)
                size += tokens
        if size >= low:
            add(chunk)
    if len(docs) < n:
        raise ValueError(f"only {len(docs)} reference documents of {low}-{high} tokens, {n} asked for")
    return docs[:n]


PREDICATES = ["Does this text describe how an exception is raised or handled?",
              "Does it include a code example?", "Does it mention a built-in function?"]
