"""Write-then-rename: the old file stays whole when a write fails, and no temporary file is left."""

import pytest

from quail.atomic import replaced_atomically, write_text_atomically


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "stats.json"
    write_text_atomically(target, "old")
    with pytest.raises(ValueError), replaced_atomically(target) as tmp:
        tmp.write_text("half")
        raise ValueError("the writer broke")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["stats.json"]


def test_two_writers_never_share_a_temporary_name(tmp_path):
    target = tmp_path / "cost.json"
    with replaced_atomically(target) as a, replaced_atomically(target) as b:
        assert a != b
        a.write_text("a")
        b.write_text("b")
    assert target.read_text() == "a"  # the outer block ends last and wins; neither file is torn
