"""The observed counts: a damaged file is set aside beside it, with a warning, and the run goes on
with no counts."""

import json
import logging

import pytest

from quail.cost.observed import SelectivityCounts, WrittenCounts

GOOD = {"0123456789abcdef": {"rows": 10, "passed": 3}}
DAMAGED = {
    "garbage": b"\xff\xfe\x00\x81garbage\x00",
    "cut off": json.dumps(GOOD).encode()[:20],
    "empty": b"",
    "a list": b"[1, 2, 3]",
    "a number": b"42",
    "a count that is text": json.dumps({"f": {"rows": "10", "passed": 3}}).encode(),
    "a count that is a flag": json.dumps({"f": {"rows": True, "passed": 0}}).encode(),
    "a count that is a fraction": json.dumps({"f": {"rows": 2.5, "passed": 1}}).encode(),
    "counts that are a number": json.dumps({"f": 7}).encode(),
    "a count missing": json.dumps({"f": {"rows": 10}}).encode(),
    "more passed than rows": json.dumps({"f": {"rows": 1, "passed": 2}}).encode(),
    "a negative count": json.dumps({"f": {"rows": -1, "passed": -1}}).encode(),
}


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_store_is_set_aside_and_the_run_goes_on_with_an_empty_one(tmp_path, caplog, content):
    path = tmp_path / "selectivity.json"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="quail.cost.observed"):
        assert SelectivityCounts(path).estimates() == {}
    [aside] = tmp_path.glob("selectivity.json.corrupt-*")
    assert aside.read_bytes() == content and not path.exists()
    assert f"the selectivity store {path} is damaged" in caplog.text and aside.name in caplog.text
    SelectivityCounts(path).record({"f": (4, 1)})
    assert SelectivityCounts(path).estimates() == {"f": 2 / 6}


def test_recording_into_a_damaged_store_keeps_the_damaged_file_aside(tmp_path):
    path = tmp_path / "selectivity.json"
    path.write_bytes(b"[]")
    SelectivityCounts(path).record({"f": (4, 1)})
    assert json.loads(path.read_text()) == {"f": {"rows": 4, "passed": 1}}
    assert [p.read_bytes() for p in tmp_path.glob("selectivity.json.corrupt-*")] == [b"[]"]


def test_a_sound_store_is_read_and_added_to(tmp_path):
    path = tmp_path / "selectivity.json"
    path.write_text(json.dumps(GOOD))
    SelectivityCounts(path).record({"0123456789abcdef": (10, 5)})
    assert SelectivityCounts(path).estimates() == {"0123456789abcdef": 9 / 22}
    assert list(tmp_path.iterdir()) == [path]


def test_the_written_store_keeps_each_parts_mean_and_sets_a_damaged_file_aside(tmp_path, caplog):
    path = tmp_path / "written.json"
    WrittenCounts(path).record({"field a": (10, 35), "field b": (10, 0)})
    WrittenCounts(path).record({"field a": (30, 85)})
    assert WrittenCounts(path).means() == {"field a": 120 / 40, "field b": 0.0}
    path.write_text(json.dumps({"f": {"rows": 1, "passed": 1}}))  # a selectivity, not written tokens
    with caplog.at_level(logging.WARNING, logger="quail.cost.observed"):
        assert WrittenCounts(path).means() == {}
    assert f"the written-token store {path} is damaged" in caplog.text
