"""Weights go to the device in the target dtype one tensor at a time: loading never holds a second
copy of the model in host memory. Measured in a fresh interpreter: the peak RSS of loading the
embedded smollm2 in bf16 is the model, the mapped file and a tensor or two in fp32, not the whole
model dequantized beside it (as before: 881 MB over the baseline, against 476 MB now). So it is
when the first load converts the weights and keeps them, and when a later one maps what it kept."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.model  # a process loads smollm2

CODE = """
import json
import gguf, torch, quail.model.gguf_loader
from quail.model.loader import load_model
from quail.model.registry import embedded_path
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, from the (large) test process
status = lambda key: next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))
base = status("VmRSS")
m = load_model("smollm2-135m", "bfloat16", "cpu").model
peak = status("VmHWM")
largest = max(t.numel() * 4 for t in [m.embed] + [l.gate_up.weight for l in m.layers])
from quail.model import converted
kept = sum(converted.disk_use().values())
print(json.dumps({"over": peak - base, "weights": m.nbytes, "largest_fp32": largest,
                  "file": max(embedded_path("smollm2-135m").stat().st_size, kept)}))
"""


def test_loading_holds_the_file_and_one_tensor_beside_the_model(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "QUAIL_CONVERTED_WEIGHTS"} | {"QUAIL_HOME": str(tmp_path / "home")}
    for load in ("converting", "mapping"):
        out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True, env=env)
        m = json.loads(out.stdout.splitlines()[-1])
        bound = m["weights"] + m["file"] + 2 * m["largest_fp32"] + (32 << 20)
        assert m["over"] <= bound, (load, m)
        # the whole model dequantized to fp32 would be twice the bf16 weights more
        assert m["over"] < m["weights"] * 3, (load, m)
