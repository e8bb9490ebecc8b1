"""What the runtime's tests share: two small tables of people, one a noisy copy of the other, and
`quail join` over them on the embedded smollm2-135m (fp32)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main

LEFT = ["anna smith; 3 high street, leeds; born 19610301", "bob jones; 12 park road, york; born 19750612",
        "carla diaz; 7 mill lane, bath; born 19880101", "dev patel; 40 the green, ely; born 19920815",
        "emma brown; 1 church walk, hull; born 19550402", "femi ade; 9 station road, derby; born 19790909"]
RIGHT = ["smith anna; 3 high st, leeds; born 19610301", "bob jone; 12 park rd, york; born 19750612",
         "carla dias; 7 mill lane, bath; born 19880101", "d patel; 40 green, ely; born 19920815",
         "emma browne; church walk, hull; born 19550402"]
CONDITION = "The two records describe the same person."


@pytest.fixture
def tables(tmp_path):
    left, right = tmp_path / "left.parquet", tmp_path / "right.parquet"
    pq.write_table(pa.table({"person": LEFT}), left)
    pq.write_table(pa.table({"person": RIGHT}), right)
    return left, right


def join(tmp_path, tables, name, *extra):
    out, stats = tmp_path / f"{name}.parquet", tmp_path / f"{name}.json"
    with pytest.raises(SystemExit) as e:
        main(["join", str(tables[0]), str(tables[1]), "--left-column", "person", "--right-column", "person",
              "--condition", CONDITION, "--threshold", "0.3", "--model", "smollm2-135m", "--dtype", "float32",
              "--output", str(out), "--stats", str(stats), *map(str, extra)])
    assert e.value.code == 0
    return pq.read_table(out), json.loads(stats.read_text())
