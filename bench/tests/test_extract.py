"""bench/data's extraction sets: disjoint from the other labelled sets, every gold value one the
fields' schema allows, and the comparison the extraction quality benchmark (bench/quality/extract.py)
scores with."""

import csv

from bench.common.results import DATA
from bench.quality.extract import PLACE_KINDS, SETS, gold, right


def _rows(name: str) -> list[dict]:
    with open(DATA / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_extraction_sets_are_disjoint_from_every_other_set_and_hold_allowed_values() -> None:
    ids = {name: {r["id"] for r in _rows(name)} for name in
           ("filter.csv", "classify.csv", "join_articles.csv", "extract_people.csv", "extract_places.csv")}
    for a in ids:
        for b in ids:
            assert a == b or not ids[a] & ids[b], (a, b)
    people, places = _rows("extract_people.csv"), _rows("extract_places.csv")
    assert len(people) == 64 and sum(r["living"] == "true" for r in people) == 32
    assert all(r["living"] in ("true", "false") and r["nationality"] in r["text"] for r in people)
    assert {r["kind"] for r in places} <= set(PLACE_KINDS) and len(places) == 85
    assert all(r["split"] in ("dev", "heldout") for r in people + places)
    assert set(SETS["people"][1]) == {"nationality", "living"} and set(SETS["places"][1]) == {"kind"}


def test_answers_are_scored_by_value_strings_without_case_or_padding() -> None:
    row = {"nationality": "French", "living": "false"}
    assert gold(row, "living") is False and gold(row, "nationality") == "French"
    assert right(" french", "French") and not right("France", "French")
    assert right(False, False) and not right(None, False) and not right(True, False)
