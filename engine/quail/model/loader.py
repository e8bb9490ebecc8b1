"""Resolves `--model` (an embedded name, a GGUF file or a safetensors directory) into a model."""

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from quail.device import cpu_info, resolve_device
from quail.errors import QuailError
from quail.model.config import ModelConfig
from quail.model.converted import Writer, converted_card, discard, open_converted, recorded_config
from quail.model.converted import root as converted_root
from quail.model.cpu_dtype import cpu_dtype
from quail.model.identity import Fingerprint, digest_while, fingerprint, model_files, record_digest, recorded_digest
from quail.model.llama import LlamaModel
from quail.model.registry import DTYPE_CHOICES, EMBEDDED, embedded_path, installed, not_installed
from quail.model.safetensors_loader import load_hf_dir
from quail.model.tokenizer import Tokenizer

if TYPE_CHECKING:
    from quail.model.gguf_loader import GGUFWeights

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str, device: torch.device, cfg: ModelConfig) -> tuple[str, str]:
    """The dtype to load in, and why. "auto": bfloat16 on a GPU; on a CPU, whichever this CPU runs
    the model's matmuls faster in, measured once per host (model/cpu_dtype.py)."""
    if dtype != "auto":
        return dtype, "given"
    if device.type != "cpu":
        return "bfloat16", f"auto: bf16 on {device.type}"
    return cpu_dtype(cfg.hidden_size, cfg.intermediate_size)


@dataclass
class LoadedModel:
    name: str
    config: ModelConfig
    model: LlamaModel
    tokenizer: Tokenizer
    digest: str = ""  # the sha256 of the bytes it loads (model/identity.py)
    dtype_why: str = ""  # why this dtype: given, or what `auto` measured
    files: tuple[Path, ...] = ()  # what it was loaded from
    loaded_from: Fingerprint = ()  # those files as they were when it loaded them

    @property
    def identity(self) -> str:
        """What its answers depend on, their key in the answer store: the weights' digest, the
        dtype, the device kind, the attention where not torch's and, on a CPU in 16 bits, the
        thread count torch runs it with (read at each call: a script may change it after loading)."""
        m = self.model
        # The fused CPU kernel sums in another order than the torch reference: its answers get keys of their own
        attention = ":cpu-attention" if m.attention_name == "cpu" else ""
        # torch's attention sums a one-row query in an order set by the thread count, and oneDNN's
        # GEMMs may split theirs by it on other CPUs. In 16 bits such a difference can round to a
        # whole ulp and grow layer by layer: a log-prob 0.5 apart at 1 and 2 threads where fp32's
        # stay within 5e-5. Answers computed at another thread count are not this model's.
        # Another CPU's kernels (AMX against AVX512-BF16) or another torch may round otherwise too.
        threads = (f":threads{torch.get_num_threads()}:{_cpu_kind()}" if m.device.type == "cpu"
                   and m.dtype != torch.float32 else "")
        return f"{self.digest}:{str(m.dtype).removeprefix('torch.')}:{m.device.type}{attention}{threads}"

    def changed(self) -> bool:
        """Whether its files changed (or went) since it loaded them: its answers are no longer theirs."""
        return bool(self.files) and fingerprint(list(self.files)) != self.loaded_from


def model_path(spec: str) -> Path:
    return embedded_path(spec) if spec in EMBEDDED else _local_path(spec)


def load_weights(path: Path) -> tuple[ModelConfig, Mapping[str, torch.Tensor], Tokenizer]:
    """The weights come as a mapping that reads each tensor when it is looked up."""
    if path.is_dir():
        return load_hf_dir(path)
    from quail.model.gguf_loader import load_gguf  # gguf only where a GGUF file is read

    return load_gguf(path)


def _local_path(spec: str) -> Path:
    """A --model that is not an embedded name: a safetensors directory or a GGUF file."""
    path = Path(spec)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise QuailError(f"model {spec}: directory has no config.json", parameter="model")
        return path
    if path.suffix == ".gguf" and path.exists():
        return path
    raise QuailError(f"model {spec!r}: not an embedded model ({', '.join(EMBEDDED)}), a .gguf file or a "
                     f"safetensors directory", parameter="model")


def check_available(spec: str) -> None:
    """Refuses, without reading any weights, a --model that names nothing loadable."""
    if spec in EMBEDDED:
        if not installed(spec):
            raise not_installed(EMBEDDED[spec])
    else:
        _local_path(spec)


@functools.cache
def _cpu_kind() -> str:
    """The CPU's model name and torch's version, digested: what a 16-bit answer's bits depend on besides the threads."""
    return hashlib.sha256(f"{cpu_info()[0]}\x1f{torch.__version__}".encode()).hexdigest()[:8]


def load_model(spec: str, dtype: str = "auto", device: str = "cpu", defer: bool = True) -> LoadedModel:
    """device: as `--device` takes it (quail.device.resolve_device). A GGUF model whose converted
    weights are kept (model/converted.py) maps them, at the first use of a weight (`defer`: a run
    whose answers are all stored reads none); the first load converts and keeps them."""
    if dtype not in DTYPE_CHOICES:
        raise QuailError(f"dtype {dtype!r}: choose one of {', '.join(DTYPE_CHOICES)}", parameter="dtype")
    on = resolve_device(device)
    path = model_path(spec)
    files = model_files(path)
    before = fingerprint(files)
    pinned = EMBEDDED[spec].sha256 if spec in EMBEDDED else None
    recorded = recorded_digest(path, files)
    if recorded is not None and pinned is not None and recorded != pinned:
        recorded = None
    loaded = None
    if recorded is not None and not path.is_dir():
        loaded = _deferred(spec, recorded, dtype, on) if defer else _mapped(recorded, dtype, on)
    writer: Writer | None = None
    if loaded is not None:
        cfg, model, tokenizer, why = loaded
        digest = recorded
    else:
        hashing = None if recorded is not None else digest_while(path, files)
        try:
            cfg, weights, tokenizer = load_weights(path)
            dtype, why = resolve_dtype(dtype, on, cfg)
            if not path.is_dir():
                gguf = cast("GGUFWeights", weights).to(DTYPES[dtype], LlamaModel.RAW_WEIGHTS)
                weights = gguf
                if (kept := converted_root()) is not None:  # converted as they load, and kept
                    writer = Writer(kept, dtype)
                    weights = writer.converting(gguf, gguf.shapes(), DTYPES[dtype], LlamaModel.RAW_WEIGHTS)
            model = _built(cfg, weights, DTYPES[dtype], on, writing=writer is not None)
        except BaseException as e:
            if writer is not None:
                writer.abandon()
            if isinstance(e, ValueError):
                raise QuailError(f"model {spec}: {e}", parameter="model") from e
            raise
        finally:
            digest = recorded if hashing is None else hashing.result()
    assert digest is not None
    problem = None
    if fingerprint(files) != before:
        problem = QuailError(f"model {spec}: {path} changed while it was loading; load it again", parameter="model")
    elif pinned is not None and digest != pinned:
        path.unlink(missing_ok=True)
        problem = QuailError(f"assembled {spec} has sha256 {digest}, expected {pinned}; removed it, retry")
    if problem is not None:
        if writer is not None:
            writer.abandon()
        raise problem
    if recorded is None:
        record_digest(path, before, digest)
    if writer is not None:
        writer.commit(digest, cfg, tokenizer)
    name = spec if spec in EMBEDDED else Path(spec).name
    return LoadedModel(name, cfg, model, tokenizer, digest, why, tuple(files), before)


def _built(cfg: ModelConfig, weights: Mapping[str, torch.Tensor], dtype: torch.dtype, on: torch.device,
           writing: bool) -> LlamaModel:
    """The model; while its converted weights are written, with one core fewer for torch: the
    writing thread's (on 2 cores, a first load 16 s instead of 19-22 s)."""
    threads = torch.get_num_threads()
    if writing and threads > 1:
        torch.set_num_threads(threads - 1)
    try:
        return LlamaModel(cfg, weights, dtype, on)
    finally:
        torch.set_num_threads(threads)


def _kept_dtype(digest: str, dtype: str, on: torch.device) -> tuple[str, str] | None:
    """The dtype a model whose converted weights are kept loads in, and why ("auto" resolved with
    the config they record); None where none are kept."""
    if dtype != "auto":
        return dtype, "given"
    cfg = recorded_config(digest)
    return None if cfg is None else resolve_dtype(dtype, on, cfg)


def _deferred(spec: str, digest: str, dtype: str,
              on: torch.device) -> tuple[ModelConfig, LlamaModel, Tokenizer, str] | None:
    """The model's config and tokenizer from its kept converted weights, and the model, whose weights
    are mapped at the first use of one (and converted again from `spec`, should they be damaged or
    gone by then); None where none are kept."""
    resolved = _kept_dtype(digest, dtype, on)
    card = converted_card(digest, resolved[0]) if resolved is not None else None
    if resolved is None or card is None:
        return None
    dtype, why = resolved
    cfg, tokenizer = card

    def build() -> LlamaModel:
        mapped = _mapped(digest, dtype, on)
        if mapped is not None:
            return mapped[1]
        again = load_model(spec, dtype, str(on), defer=False)
        if again.digest != digest:
            raise QuailError(f"model {spec}: its file changed after it was opened; run again", parameter="model")
        return again.model

    return cfg, LlamaModel.deferred(cfg, DTYPES[dtype], on, build), tokenizer, why


def _mapped(digest: str, dtype: str, on: torch.device) -> tuple[ModelConfig, LlamaModel, Tokenizer, str] | None:
    """The model built from its kept converted weights, where they are there and every byte of them
    is their writer's; None where not (a damaged copy is removed: the load converts again)."""
    resolved = _kept_dtype(digest, dtype, on)
    converted = open_converted(digest, resolved[0]) if resolved is not None else None
    if resolved is None or converted is None:
        return None
    dtype, why = resolved
    try:
        model = LlamaModel(converted.config, converted.weights, DTYPES[dtype], on)
    except Exception as e:  # noqa: BLE001 (a file that maps but builds no model is damaged too)
        converted.verified.result()
        discard(converted.path, f"no model ({e})")
        return None
    if not converted.verified.result():
        discard(converted.path, "not the bytes their writer wrote")
        return None
    return converted.config, model, converted.tokenizer, why
