"""Staged windows: reused only from a folder of this user's that nobody else can write, and only
when the table matches the digest its sidecar recorded (probe 4: a second uid planted a window in
a shared folder, and the owner's task wrote the planted row)."""

import os

import pyarrow as pa
import pytest

from airflow_quail.staging import WindowStage
from quail.errors import QuailError
from quail.worker.jobs import Origin

IDENTITY = Origin("news", "sport", "r1")


def _stage(tmp_path) -> WindowStage:
    target = tmp_path / "sport.parquet"
    return WindowStage(str(target), target, IDENTITY)


def test_a_window_is_reused_only_if_its_table_matches_its_digest(tmp_path):
    stage = _stage(tmp_path)
    stage.put(0, "d" * 64, pa.table({"text": ["kept"]}), {"rows": 1})
    assert stage.done(0, "d" * 64) == {"rows": 1} and stage.folder.stat().st_mode & 0o777 == 0o700
    [table] = stage.folder.glob("*.parquet")
    planted = tmp_path / "planted.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["planted"]}), planted)
    os.replace(planted, table)
    with pytest.raises(QuailError, match="does not match the digest its sidecar recorded"):
        stage.done(0, "d" * 64)


def test_a_staging_folder_others_can_write_is_refused(tmp_path):
    stage = _stage(tmp_path)
    stage.folder.mkdir(mode=0o777)
    stage.folder.chmod(0o777)
    with pytest.raises(QuailError, match="writable by other users"):
        stage.put(0, "d" * 64, pa.table({"text": ["x"]}), {"rows": 1})


@pytest.mark.skipif(os.getuid() != 0, reason="planting a folder as another user needs root")
def test_a_staging_folder_another_user_planted_is_refused(tmp_path):
    tmp_path.chmod(0o1777)  # a shared folder, as the probe's
    stage = _stage(tmp_path)
    stage.folder.mkdir(mode=0o700)
    (stage.folder / "window-000000-dddddddddddddddd.json").write_text('{"rows": 1}')
    os.chown(stage.folder, 4242, 4242)
    with pytest.raises(QuailError, match="belongs to another user \\(uid 4242\\)"):
        stage.done(0, "d" * 64)
