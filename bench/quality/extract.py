"""Extraction quality of the embedded models on public labelled data: Wikipedia leads (bench/data,
CC BY-SA 4.0; its README says how they were made), each row's gold values taken from the
article's short description, which Wikipedia's editors write apart from the lead the model reads.

- people (64 leads): `nationality: str` (the description's demonym, compared case-insensitively)
  and `living: bool` ("(born 1947)": alive; a span of years: not);
- places (85 leads): `kind`, an enum of eight kinds of place.

For each model, on the CPU at dtype auto, greedy and held to the fields' schema: per-field
accuracy, exact match (every field of a row right), the share of null answers, tokens and seconds.
Results merge per model into the output file (default bench/results/extract-quality-YYYYMMDD.json,
and .md); `--output-json bench/results/extract-quality.json` adds to the committed results.

    python -m bench quality extract [MODEL ...] [--rows N]
"""

import csv
import json
import time

from bench.common.labelled import MODELS
from bench.common.results import DATA, machine, parser, previous, write_json

PLACE_KINDS = ["country", "city", "river", "lake", "mountain range", "island", "sea", "desert"]
SETS = {
    "people": ("extract_people.csv", {
        "nationality": {"type": "str", "description": "the person's nationality, as an adjective such as French"},
        "living": {"type": "bool", "description": "whether the person is alive today, as the text tells"},
    }),
    "places": ("extract_places.csv", {
        "kind": {"type": "enum", "values": PLACE_KINDS, "description": "what kind of place the text is about"},
    }),
}


def gold(row: dict, field: str) -> object:
    return {"true": True, "false": False}.get(row[field], row[field])


def right(got: object, want: object) -> bool:
    if isinstance(want, str) and isinstance(got, str):
        return got.strip().lower() == want.lower()
    return got == want


def measure(session, rows: list[dict], fields: dict) -> dict:
    from quail.kinds.extract import parse_fields

    started = time.perf_counter()
    result, stats = session.extract([r["text"] for r in rows], parse_fields(fields), max_new_tokens=48)
    seconds = time.perf_counter() - started
    values = [v or {} for v in result.values]
    hits = {f: [right(v.get(f), gold(r, f)) for v, r in zip(values, rows)] for f in fields}
    return {
        "rows": len(rows),
        "accuracy": {f: round(sum(h) / len(rows), 3) for f, h in hits.items()},
        "exact_match": round(sum(all(h[i] for h in hits.values()) for i in range(len(rows))) / len(rows), 3),
        "null": {f: round(sum(v.get(f) is None for v in values) / len(rows), 3) for f in fields},
        "truncated": sum(result.truncated),
        "wrong": [{"id": r["id"], **{f: v.get(f) for f in fields}, "gold": {f: gold(r, f) for f in fields}}
                  for v, r, *h in zip(values, rows, *hits.values()) if not all(h)][:8],
        "tokens_computed": stats.tokens_computed, "tokens_generated": stats.tokens_generated,
        "seconds": round(seconds, 1),
    }


def markdown(doc: dict) -> str:
    lines = [f"Extraction quality ({doc['machine']['cpu']}, dtype auto, greedy, schema-held)", "",
             "| model | set | split | rows | per-field accuracy | exact match | null | seconds |",
             "|---|---|---|---:|---|---:|---|---:|"]
    for model, sets in doc["runs"].items():
        for name, splits in sets.items():
            for split, r in splits.items():
                acc = ", ".join(f"{f} {a:.2f}" for f, a in r["accuracy"].items())
                null = ", ".join(f"{f} {a:.2f}" for f, a in r["null"].items())
                lines.append(f"| {model} ({r['dtype']}) | {name} | {split} | {r['rows']} | {acc} | "
                             f"{r['exact_match']:.2f} | {null} | {r['seconds']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, stem="extract-quality")
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--rows", type=int, help="at most this many rows a set and split (a smoke run)")
    args = ap.parse_args(argv)
    from quail.session import Session

    stem = "extract-quality" + (f"-rows{args.rows}" if args.rows else "")
    doc = previous(args, stem) or {"runs": {}}
    doc["machine"] = machine()
    for model in args.models:
        session = Session.open(model, "auto", device="cpu")
        runs = doc["runs"].setdefault(model, {})
        for name, (path, fields) in SETS.items():
            with open(DATA / path, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            for split in ("dev", "heldout"):
                part = [r for r in rows if r["split"] == split][:args.rows]
                r = measure(session, part, fields) | {"dtype": str(session.engine.model.dtype).removeprefix("torch.")}
                runs.setdefault(name, {})[split] = r
                print(model, name, split, json.dumps({k: r[k] for k in ("accuracy", "exact_match", "seconds")}),
                      flush=True)
        write_json(args, doc, stem, markdown(doc))
    print(markdown(doc))
