"""Accuracy of the embedded models on bench/topics.csv (40 headlines, 8 per topic, written for this
benchmark): a "is this about sport?" filter and 5-way topic classification; and on the 180 jokes of
examples/jokes.csv, yes/no questions whose truth is whether the joke names something (a keyword
test, so approximate): accuracy at P(yes) >= 0.5 and AUC (how well P(yes) ranks them).

    .venv/bin/python bench/accuracy.py [MODEL ...]
"""

import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv

from quail.model.registry import installed
from quail.session import Session

TOPICS = ["sport", "business", "technology", "politics", "entertainment"]
LANGUAGES = ["Python", "Java", "C++", "C#", "Perl", "PHP", "SQL", "COBOL", "JavaScript", "Prolog", "Ruby", "HTML",
             "In C ", "C code", "C programmers", "C language", "the C?"]
JOKE_QUESTIONS = [  # the jokes DAG's predicates first, then concrete ones
    ("Does the joke name a programming language, operating system or tool?",
     LANGUAGES + ["Windows", "WINDOWS", "Unix", "UNIX", "Ubuntu", "Linux", "Vim", "Emacs", "Jira", "Bing"]),
    ("Does the joke mention a programming language?", LANGUAGES),
    ("Is this joke about Java?", ["Java ", "Java.", "Java,", "Java:", "Java'", "Java?"]),
    ("Does the joke mention Microsoft Windows?", ["Windows", "WINDOWS"]),
    ("Is this joke set in a bar?", ["a bar", "bar.", "bar,"]),
]


def auc(scores, truth) -> float:
    """The probability that a true item scores above a false one (ties count half)."""
    pos, neg = scores[truth], scores[~truth]
    return float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))


def jokes(s: Session, name: str) -> None:
    texts = pacsv.read_csv(Path(__file__).parents[1] / "examples" / "jokes.csv")["joke"].to_pylist()
    r, _ = s.filter(texts, [q for q, _ in JOKE_QUESTIONS], threshold=0.0)  # every question on every joke
    p = np.array(r.p_yes, dtype=float)
    for k, (question, words) in enumerate(JOKE_QUESTIONS):
        truth = np.array([any(w in t for w in words) for t in texts])
        acc = np.mean((p[:, k] >= 0.5) == truth)
        print(f"{name}: jokes {question!r}: {truth.sum()} true, accuracy {acc:.2f}, AUC {auc(p[:, k], truth):.2f}")


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
        jokes(s, name)


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
