"""The answer store's cost per answer: inserts and lookups per second and bytes on disk, for
SQLite in WAL mode (quail/answer_store.py) and, as the simplest alternative a user could
reach for, the standard library's dbm (one key-value file, one writer, no LRU, no sharing across
processes while written).

    python bench/answer_store.py 200000
"""

import dbm
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from quail.answer_store import AnswerStore, answer_key


def main(n: int) -> None:
    rng = random.Random(0)
    items = [(answer_key("model:float32:cpu", "filter\x1fnone\x1f[1, 2, 3]", [i]), [rng.random()]) for i in range(n)]
    keys = [k for k, _ in items]
    rng.shuffle(keys)
    with tempfile.TemporaryDirectory() as d:
        store = AnswerStore(Path(d) / "a.sqlite")
        t = time.perf_counter()
        for lo in range(0, n, 8192):  # a window's answers at a time, as a run writes them
            store.put(items[lo : lo + 8192])
        put = time.perf_counter() - t
        store.close()
        store = AnswerStore(Path(d) / "a.sqlite")  # another process's view: nothing found lately in memory
        t = time.perf_counter()
        found = sum(len(store.get(keys[lo : lo + 8192], 1)) for lo in range(0, n, 8192))
        get = time.perf_counter() - t
        report("sqlite (WAL)", n, put, get, found, store.size())
        with dbm.open(str(Path(d) / "b"), "c") as db:
            t = time.perf_counter()
            for k, v in items:
                db[k] = json.dumps(v)
            put = time.perf_counter() - t
            t = time.perf_counter()
            found = sum(k in db and bool(db[k]) for k in keys)
            get = time.perf_counter() - t
        size = sum(p.stat().st_size for p in Path(d).glob("b*"))
        report(f"dbm ({dbm.whichdb(str(Path(d) / 'b'))})", n, put, get, found, size)


def report(name: str, n: int, put: float, get: float, found: int, size: int) -> None:
    print(json.dumps({"store": name, "answers": n, "found": found, "inserts_per_s": round(n / put),
                      "lookups_per_s": round(n / get), "bytes_per_answer": round(size / n, 1)}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
