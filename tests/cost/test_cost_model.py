"""The cost model is measured, fitted and cached per device and model."""

import pytest

from quail.cost.model import CostModel, Sample
from quail.executor import timing
from quail.executor.timing import measured_cost


def test_fit_recovers_a_linear_cost():
    truth = dict(per_pass=0.01, per_token=0.002, per_token_context=1e-6)
    samples = [Sample(n, c, truth["per_pass"] + n * (truth["per_token"] + c * truth["per_token_context"]))
               for n, c in [(16, 8), (64, 32), (256, 128), (64, 300), (64, 600)]]
    cost = CostModel.fit(samples, kv_write_per_page=1e-5, max_batch_tokens=256, device="test")
    for name, value in truth.items():
        assert abs(getattr(cost, name) - value) < 1e-9
    # 300 tokens in two passes, with the mean context growing along the document
    assert abs(cost.prefill_seconds(300) - (0.02 + 300 * (0.002 + 149.5e-6))) < 1e-9


def test_sharing_rule_weighs_compute_saved_against_kv_writes():
    cost = CostModel(per_pass=0.0, per_token=1e-3, per_token_context=0.0, kv_write_per_page=2e-2,
                     max_batch_tokens=256)
    assert cost.sharing_saves(64, 4) is False  # 64 ms saved, 80 ms of writes
    assert cost.sharing_saves(160, 4) is True


def test_calibration_is_measured_once_and_cached(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    monkeypatch.delenv("QUAIL_CALIBRATIONS", raising=False)
    first = measured_cost(tiny_llama, 256)
    assert first.per_token > 0 and first.kv_write_per_page > 0
    assert len(list((tmp_path / "cost").glob("*.json"))) == 1

    def measure_again(*_):
        raise AssertionError("the cached calibration was measured again")

    monkeypatch.setattr(timing, "measure", measure_again)
    assert measured_cost(tiny_llama, 256) == first


def test_homes_share_the_calibrations_quail_calibrations_names(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_CALIBRATIONS", str(tmp_path / "shared"))
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "one"))
    first = measured_cost(tiny_llama, 256)
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "two"))
    monkeypatch.setattr(timing, "measure", lambda *_: pytest.fail("measured again in another home"))
    assert measured_cost(tiny_llama, 256) == first
    assert len(list((tmp_path / "shared").glob("*.json"))) == 1 and not (tmp_path / "one" / "cost").exists()
    assert (tmp_path / "shared").stat().st_mode & 0o077 == 0  # made private, as $QUAIL_HOME is
