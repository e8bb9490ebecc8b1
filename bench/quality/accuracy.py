"""Accuracy of the embedded models on bench/data/topics.csv (40 headlines, 8 per topic, written for
this benchmark): a "is this about sport?" filter and 5-way topic classification; and on the 180
jokes of examples/jokes.csv, yes/no questions whose truth is whether the joke names something (a
keyword test, so approximate): accuracy at P(yes) >= 0.5 and AUC (how well P(yes) ranks them).

    python -m bench quality accuracy [MODEL ...]
"""

import numpy as np
import pyarrow.csv as pacsv

from bench.common.labelled import MODELS
from bench.common.metrics import auc
from bench.common.results import DATA, ROOT, parser, write_json

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


def jokes(s: object, name: str) -> list[dict]:
    texts = pacsv.read_csv(ROOT / "examples" / "jokes.csv")["joke"].to_pylist()
    r, _ = s.filter(texts, [q for q, _ in JOKE_QUESTIONS], threshold=0.0)  # every question on every joke
    p = np.array(r.p_yes, dtype=float)
    out = []
    for k, (question, words) in enumerate(JOKE_QUESTIONS):
        truth = np.array([any(w in t for w in words) for t in texts])
        out.append({"question": question, "true": int(truth.sum()),
                    "accuracy": float(np.mean((p[:, k] >= 0.5) == truth)), "auc": auc(p[:, k], truth)})
        print(f"{name}: jokes {question!r}: {out[-1]['true']} true, accuracy {out[-1]['accuracy']:.2f}, "
              f"AUC {out[-1]['auc']:.2f}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("models", nargs="*", default=MODELS)
    args = ap.parse_args(argv)
    from quail.model.registry import installed
    from quail.session import Session

    table = pacsv.read_csv(DATA / "topics.csv")
    texts, truth = table["text"].to_pylist(), table["topic"].to_pylist()
    runs = {}
    for name in args.models:
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
        runs[name] = {"dtype": "bfloat16", "sport_filter_accuracy": filt, "sport_said_yes": said_yes,
                      "topics_accuracy": cls, "jokes": jokes(s, name)}
    write_json(args, {"rows": len(truth), "runs": runs})
