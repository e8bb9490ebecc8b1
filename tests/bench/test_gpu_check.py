"""The prepared GPU check (bench/gpu_check.sh) runs end to end in its CPU smoke mode, from the files
it would carry, and writes the keys the GPU run must report; so the script a GPU session runs has
not rotted since it was written. Its figures on a CPU mean nothing and are not asserted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# bench's processes build a random tiny Qwen2 with transformers and run it (as tiny_hf_model does)
pytestmark = [pytest.mark.model, pytest.mark.services]

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_smoke_run_writes_every_key(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "engine"), OUT=str(tmp_path), PYTHON=sys.executable,
               TORCHDYNAMO_DISABLE="1",  # W5: compiling llguidance's mask costs more than this run
               QUAIL_HOME=str(tmp_path / "home"))
    carry = tmp_path / "carry"
    subprocess.run([sys.executable, "bench/gpu_w1.py", "--prepare", str(carry), "--docs", "6"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    assert (carry / "tokenizer.json").stat().st_size < 8 << 20  # it must fit what travels to the GPU machine
    out = subprocess.run(["bash", "bench/gpu_check.sh", "--device", "cpu", "--small", "--tokenizer",
                          str(carry / "tokenizer.json"), "--documents", str(carry / "documents.json")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "gpu.json").read_text())
    assert not doc["errors"], doc["errors"]
    assert set(doc["w1"]) >= {"quail_s", "rowwise_s", "batched_s", "tokens_computed", "tokens_naive"}
    assert set(doc["prefill_tok_s"]) >= {"quail", "transformers"}
    assert {"questions_of_flop_ceiling", "one_token_of_bandwidth", "tuned"} <= set(doc)
    assert doc["w5"]["quail"]["generated"] > 0 and doc["w5"]["batched"]["generated"] > 0  # kept rows, written
    table = doc["table"]  # the table through `quail pipeline`: every row read, the filter's rows classified
    assert table["rows"] == 300 and 0 < table["kept"] < 300 and table["tokens_computed"] <= table["tokens_naive"]
    assert {"seconds", "tok_s", "mfu", "peak_memory_gib", "minutes_per_million_rows", "x_transformers"} <= set(table)
    assert doc["w1"]["tokens_computed"] < doc["w1"]["tokens_naive"] and doc["kernel_ok"]
