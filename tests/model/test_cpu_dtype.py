"""--dtype auto on a CPU: chosen by timing this CPU's matmuls in fp32 and bf16 once per host and
model shape, kept in QUAIL_HOME so that one machine always chooses alike, and said with its reason."""

import json

import pytest

from quail.model import cpu_dtype as cd


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_real_measurement_is_kept_and_read_back(home, monkeypatch):
    dtype, why = cd.cpu_dtype(576, 1536)
    assert dtype in ("float32", "bfloat16") and "x fp32's on this CPU (measured" in why
    [(key, times)] = json.loads((home / "cpu-dtype.json").read_text()).items()
    assert "576x1536" in key and times["float32_s"] > 0 and times["bfloat16_s"] > 0

    def never(*_):
        raise AssertionError("measured again")

    monkeypatch.setattr(cd, "_seconds", never)
    assert cd.cpu_dtype(576, 1536) == (dtype, why)  # the same host and shape: read, not measured
    with pytest.raises(AssertionError, match="measured again"):
        cd.cpu_dtype(896, 4864)  # another shape is measured


@pytest.mark.parametrize("fp32, bf16, chosen", [(2.0, 1.0, "bfloat16"), (1.2, 1.0, "bfloat16"),
                                                (1.1, 1.0, "float32"), (1.0, 2.0, "float32")])
def test_bf16_only_where_it_is_clearly_faster(home, monkeypatch, fp32, bf16, chosen):
    import torch

    monkeypatch.setattr(cd, "_seconds", lambda dtype, *_: fp32 if dtype == torch.float32 else bf16)
    assert cd.cpu_dtype(64, 128)[0] == chosen


def test_a_garbled_or_foreign_cache_is_measured_anew(home, monkeypatch):
    import torch

    home.mkdir(mode=0o700)
    (home / "cpu-dtype.json").write_text("{not json")
    monkeypatch.setattr(cd, "_seconds", lambda dtype, *_: 1.0 if dtype == torch.float32 else 0.5)
    assert cd.cpu_dtype(64, 128)[0] == "bfloat16"
    key = next(iter(json.loads((home / "cpu-dtype.json").read_text())))
    (home / "cpu-dtype.json").write_text(json.dumps({key: {"float32_s": "fast", "bfloat16_s": 1.0}}))
    (home / "cpu-dtype.json").chmod(0o666)  # writable by others: not trusted
    monkeypatch.setattr(cd, "_seconds", lambda dtype, *_: 1.0 if dtype == torch.float32 else 2.0)
    assert cd.cpu_dtype(64, 128)[0] == "float32"


def test_a_given_dtype_is_kept_and_said(smollm2, tmp_path, monkeypatch):
    from quail.model.loader import load_model

    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    loaded = load_model("smollm2-135m", "float32")
    assert loaded.dtype_why == "given" and loaded.identity.endswith(":float32:cpu")
    auto = load_model("smollm2-135m", "auto")
    assert "measured" in auto.dtype_why and auto.identity.split(":")[1] in ("float32", "bfloat16")
    # The fused CPU attention sums in another order: its answers are stored apart
    assert (":cpu-attention" in auto.identity) == (auto.model.attention_name == "cpu")
    assert loaded.model.attention_name == "torch" and "float32" in loaded.model.attention_why
