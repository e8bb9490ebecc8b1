import ctypes
import gc
import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_TRIM_ABOVE = 2 << 30  # resident bytes


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Two pytest processes share the machine's 24 GiB. What a test's models and arenas freed stays
    in glibc's heaps, so a process grew by gigabytes a module until the kernel killed it (20 GB):
    past 2 GiB resident, it is handed back to the system after the test."""
    if os.path.exists("/proc/self/statm") and _resident() > _TRIM_ABOVE:
        gc.collect()
        ctypes.CDLL(None).malloc_trim(0)

# The worker extra: a test module that needs one of these is skipped, by name, where only the provider is
# installed (`make test-fast` runs the pure layers with the provider alone).
_WORKER_EXTRA = frozenset({"torch", "transformers", "gguf", "tokenizers", "safetensors", "triton", "accelerate"})


def _missing_worker_package(error: BaseException | None) -> str | None:
    while error is not None:
        if isinstance(error, ModuleNotFoundError) and (error.name or "").partition(".")[0] in _WORKER_EXTRA:
            return error.name
        error = error.__cause__ or error.__context__
    return None


def pytest_make_collect_report(collector):
    if not isinstance(collector, pytest.Module):
        return None
    try:
        collector.obj  # noqa: B018 (imports the module)
    except collector.CollectError as e:
        if (name := _missing_worker_package(e)) is not None:
            reason = f"needs {name}, from the worker extra (pip install 'airflow-quail[worker]')"
            return pytest.CollectReport(collector.nodeid, "skipped", (str(collector.path), None, reason), [])
    except Exception:
        pass  # pytest's own collection reports it
    return None


def tiny_hf_model(arch: str = "llama", seed: int = 0, **overrides):
    """A small random-weight transformers model of the given architecture (the reference)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
               "mistral": (MistralConfig, MistralForCausalLM)}
    cfg_cls, model_cls = classes[arch]
    kw = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0,
              tie_word_embeddings=False)
    kw.update(overrides)
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**kw)).eval().float()
    if arch == "qwen2":  # random init leaves biases at zero; make them matter
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    return model


def quail_from_hf(hf_model, dtype=None):
    import torch

    from quail.model.config import ModelConfig
    from quail.model.llama import LlamaModel

    cfg = ModelConfig.from_hf(hf_model.config.to_dict())
    return LlamaModel(cfg, dict(hf_model.state_dict()), dtype=dtype or torch.float32)


@pytest.fixture(scope="session")
def tiny_llama():
    return quail_from_hf(tiny_hf_model("llama"))


@pytest.fixture(scope="session")
def smollm2():
    from quail.model.loader import load_model

    return load_model("smollm2-135m", "float32")


@pytest.fixture
def smollm2_for_every_session(monkeypatch, smollm2):
    """Every Session.open (the CLI's, a pipeline's) reuses one loaded smollm2 instead of reading the
    GGUF again."""
    from quail.device import resolve_device

    # the device is still resolved, so a --device the machine lacks is refused as it would be
    monkeypatch.setattr("quail.session.load_model", lambda spec, dtype, device="auto": (resolve_device(device), smollm2)[1])


@pytest.fixture(scope="session", autouse=True)
def _converted_weights_once(tmp_path_factory):
    """Tests start workers and CLIs under a QUAIL_HOME of their own: one folder of converted weights
    and one of calibrations for the whole run (every xdist worker's, and the processes they start)
    convert each model and measure each calibration once."""
    base = tmp_path_factory.getbasetemp()
    for name, variable in (("converted-weights", "QUAIL_CONVERTED_WEIGHTS"), ("calibrations", "QUAIL_CALIBRATIONS")):
        folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
        folder.mkdir(mode=0o700, exist_ok=True)
        os.environ.setdefault(variable, str(folder))


@pytest.fixture(autouse=True)
def _private_counts_and_answers(monkeypatch, tmp_path):
    """Runs record observed counts and keep answers; tests keep theirs out of the user's home and
    answer store. (Calibrations stay in the shared cache: they describe this machine, not a test.)"""
    monkeypatch.setattr("quail.cost.observed.home", lambda: tmp_path / "quail-home")
    monkeypatch.setenv("QUAIL_ANSWER_STORE", str(tmp_path / "answers.sqlite"))  # workers started here too


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2):
    """A random 2-layer Llama (hidden 64, seed 0) with smollm2's tokenizer and vocabulary, saved as a
    safetensors directory: a second, different model that the CLI and Session.open load by path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    smollm2.tokenizer._tk.save(str(path / "tokenizer.json"))
    return path


# What a test needs: a model loaded (an embedded one, a random one built with transformers, or a worker
# started, which loads one) or a whole Airflow. `make test-fast` leaves both out; `make test` runs
# everything. A test that requests one of these fixtures, directly or through another fixture (or
# `usefixtures`), is marked by it; a module that loads a model without one (Session.open, a `quail
# ... --model` process, tiny_hf_model, serving) says so itself with `pytestmark = pytest.mark.model`.
_MODEL_FIXTURES = frozenset({
    "smollm2", "tiny_llama", "tiny_model_dir",  # here
    "local_default", "two_workers", "pool",  # airflow_quail/conftest.py: a worker that loads smollm2
})
_DEPLOYMENT_FIXTURES = frozenset({"airflow_env"})  # airflow_quail/conftest.py


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & _DEPLOYMENT_FIXTURES:
            item.add_marker(pytest.mark.deployment)
        if fixtures & _MODEL_FIXTURES or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.model)
