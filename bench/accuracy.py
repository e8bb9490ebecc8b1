"""Accuracy of the embedded models on bench/topics.csv (40 headlines, 8 per topic, written for this
benchmark): a "is this about sport?" filter and 5-way topic classification.

    .venv/bin/python bench/accuracy.py [MODEL ...]
"""

import sys
from pathlib import Path

import pyarrow.csv as pacsv

from quail.model.registry import installed
from quail.session import Session

TOPICS = ["sport", "business", "technology", "politics", "entertainment"]


def main(models):
    table = pacsv.read_csv(Path(__file__).parent / "topics.csv")
    texts, truth = table["text"].to_pylist(), table["topic"].to_pylist()
    for name in models:
        if not installed(name):
            print(f"{name}: not installed, skipped")
            continue
        s = Session.open(name, "bfloat16")
        f, _ = s.filter(texts, ["Is this article about sport?"])
        filt = sum(p == (t == "sport") for p, t in zip(f.passed, truth)) / len(truth)
        said_yes = sum(f.passed)
        c, _ = s.classify(texts, TOPICS, "Which topic is this article about?")
        cls = sum(TOPICS[i] == t for i, t in zip(c.labels, truth)) / len(truth)
        print(f"{name}: sport filter {filt:.2f} ({said_yes}/{len(truth)} said yes, 8 are sport); "
              f"5-way topics {cls:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
