"""Converted weights kept: a GGUF model's tensors dequantized into the dtype it runs in, written
once beside its tokenizer and config, then mapped by every later load instead of dequantizing the
file again (17.7 s of a 1.5B's 27 s start, issue #53).

Under $QUAIL_HOME/models/converted/<digest>/ (or $QUAIL_CONVERTED_WEIGHTS/<digest>/; "off" keeps
none), for the model whose bytes have that sha256: `<dtype>.safetensors` and `<dtype>.json`, the
record of what its writer wrote: the config, and the digests of the tensors (`weights_digest`) and
of `tokenizer.json`. A load checks those digests on a thread while it maps the tensors, unless the
files still have the fingerprint `<dtype>.verified` records (their writer's, once they were on
disk, or an earlier check's). A model built from bytes that do not match them is dropped and the
folder removed: a damaged or planted file is never used, only rebuilt. Folders are written under a
temporary name and renamed whole, so a writer killed halfway leaves nothing a reader could take.

The tensors are written as the model asks for them, each at the place the header gave it, on a
thread beside the load, since safetensors' own writer takes every tensor in memory at once: a
second copy of the model. Tensors the model reads in their own dtype (LlamaModel.RAW_WEIGHTS) are
kept as the GGUF gives them."""

import ctypes
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import struct
import sys
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from quail.model.config import ModelConfig, RopeScaling
from quail.model.identity import DIGESTS, Fingerprint, file_sha256, fingerprint
from quail.model.safetensors_loader import SafetensorsWeights
from quail.model.tokenizer import Tokenizer
from quail.paths import home
from quail.trust import owned_file, private_folder

log = logging.getLogger(__name__)
_SYNC_FILE_RANGE = getattr(ctypes.CDLL(None), "sync_file_range", None) if sys.platform == "linux" else None
if _SYNC_FILE_RANGE is not None:
    _SYNC_FILE_RANGE.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]

FORMAT = 2  # 1 recorded the weights file's plain sha256
QUEUED_BYTES = 1 << 26  # tensors held for the writing thread (1 GiB: +1 GB of peak RSS, and slower)
_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
_TOKENIZER = "tokenizer.json"


def root() -> Path | None:
    """Where converted weights are kept, None where they are not."""
    given = os.environ.get("QUAIL_CONVERTED_WEIGHTS", "")
    if given == "off":
        return None
    return private_folder(Path(given) if given else home() / "models" / "converted")


def folder(digest: str) -> Path:
    kept = root()
    assert kept is not None
    return kept / digest


def _config(d: dict) -> ModelConfig:
    return ModelConfig(**(d | {"rope_scaling": RopeScaling(**d["rope_scaling"])}))


@dataclasses.dataclass
class Converted:
    """A model's converted files as one load maps them; `verified` says, once its thread is done,
    whether every byte is the writer's."""

    config: ModelConfig
    weights: SafetensorsWeights
    tokenizer: Tokenizer
    verified: Future
    path: Path


def recorded_config(digest: str) -> ModelConfig | None:
    """The config any converted dtype of the model records: what resolving "auto" needs to know
    (the dtype it picks is then opened, and its own record read)."""
    kept = root()
    where = kept / digest if kept is not None else None
    for record in sorted(where.glob("*.json")) if where is not None and where.is_dir() else []:
        try:
            if owned_file(record) and record.name != _TOKENIZER:
                return _config(json.loads(record.read_text())["config"])
        except Exception:  # noqa: BLE001 (an unreadable record helps no one: the load converts)
            continue
    return None


def _record(digest: str, dtype: str) -> tuple[dict, Path, Path] | None:
    """The record of the model `digest`'s converted files in `dtype`, and the weights' and the
    tokenizer's paths; None where they are not all there and this user's. Raises on a record of
    another format or model."""
    where = folder(digest)
    record_path, weights_path, tokenizer_path = where / f"{dtype}.json", where / f"{dtype}.safetensors", \
        where / _TOKENIZER
    if not all(owned_file(p) for p in (record_path, weights_path, tokenizer_path)):
        return None
    record = json.loads(record_path.read_text())
    if record.get("format") != FORMAT or record.get("digest") != digest or record.get("dtype") != dtype:
        raise ValueError("a record of another format or model")
    return record, weights_path, tokenizer_path


def converted_card(digest: str, dtype: str) -> tuple[ModelConfig, Tokenizer] | None:
    """The config and the tokenizer kept with the model `digest`'s converted weights in `dtype`:
    what a run needs before it knows whether it computes anything. The tokenizer is checked byte for
    byte now (the answer store's keys are its tokens), the weights when they are read
    (`open_converted`). None where they are not there or not whole: the load converts."""
    if root() is None:
        return None
    try:
        found = _record(digest, dtype)
        if found is None:
            return None
        record, weights_path, tokenizer_path = found
        if not _checked(digest, dtype, [weights_path, tokenizer_path]) \
                and file_sha256(tokenizer_path) != str(record["tokenizer_sha256"]):
            return None
        return _config(record["config"]), Tokenizer.from_file(tokenizer_path)
    except Exception:  # noqa: BLE001 (an unreadable record helps no one: the load converts)
        return None


def open_converted(digest: str, dtype: str) -> Converted | None:
    """The converted files of the model `digest` in `dtype`, or None where there are none (or they
    are not this user's, or their record is unreadable: then they are removed, to be rebuilt)."""
    if root() is None:
        return None
    where = folder(digest)
    try:
        found = _record(digest, dtype)
        if found is None:
            return None
        record, weights_path, tokenizer_path = found
        config = _config(record["config"])
        expected = {weights_path: str(record["weights_digest"]), tokenizer_path: str(record["tokenizer_sha256"])}
        weights = SafetensorsWeights([weights_path])
        tokenizer = Tokenizer.from_file(tokenizer_path)
    except Exception as e:  # noqa: BLE001 (anything unreadable is rebuilt, never used)
        discard(where, f"unreadable ({e})")
        return None
    return Converted(config, weights, tokenizer, _verify(digest, dtype, expected), where)


def _checked(digest: str, dtype: str, files: list[Path]) -> bool:
    """Whether these files still have the fingerprint recorded when their bytes were last found to
    be their writer's (`_verify`)."""
    record = folder(digest) / f"{dtype}.verified"
    try:
        return owned_file(record) and json.loads(record.read_text()) == [list(f) for f in fingerprint(files)]
    except (OSError, ValueError):
        return False


def _verify(digest: str, dtype: str, expected: dict[Path, str]) -> Future:
    """Whether the files hold the bytes of these digests (`weights_digest` for the weights, sha256
    for the tokenizer), checked on a thread (hashlib releases the
    GIL: the check runs beside the load). Once checked, the files' fingerprint is recorded (after
    an fsync, so that it never outlives their bytes): while they keep it, as a model file's digest
    is kept (model/identity.py), later loads do not read them twice."""
    files = list(expected)
    seen = fingerprint(files)
    done: Future = Future()
    if _checked(digest, dtype, files):
        done.set_result(True)
        return done

    def check() -> bool:
        if not all((weights_digest(p) if p.suffix == ".safetensors" else file_sha256(p)) == d
                   for p, d in expected.items()):
            return False
        _mark_verified(digest, dtype, files, seen)
        return True

    pool = ThreadPoolExecutor(1, thread_name_prefix="quail-verify")
    try:
        return pool.submit(check)
    finally:
        pool.shutdown(wait=False)


def weights_digest(path: Path) -> str:
    """A converted weights file's digest: the sha256 of its header followed by each tensor's own
    sha256, in the file's order, so that its writer digests each tensor as it writes it, in the
    order the model asks for them. "" for a file that is not whole (a byte missing, or one past
    its last tensor)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else size
            if 8 + length > size:
                return ""
            head += f.read(length)
            spans = sorted(tuple(v["data_offsets"]) for k, v in json.loads(head[8:]).items() if k != "__metadata__")
            whole, end, buf = hashlib.sha256(head), 0, memoryview(bytearray(1 << 20))
            for lo, hi in spans:
                if lo != end:
                    return ""
                tensor = hashlib.sha256()
                while end < hi:
                    got = f.readinto(buf[:min(hi - end, len(buf))])
                    if not got:
                        return ""
                    tensor.update(buf[:got])
                    end += got
                whole.update(tensor.digest())
            return whole.hexdigest() if 8 + length + end == size else ""
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return ""


def _write_back(fd: int, at: int, size: int) -> None:
    """Starts the disk writing these bytes now, without waiting for it (Linux's sync_file_range),
    so that the fdatasync at the end waits for little."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, at, size, 2)  # SYNC_FILE_RANGE_WRITE


def _mark_verified(digest: str, dtype: str, files: list[Path], seen: Fingerprint) -> None:
    """Records that the files hold their writer's bytes while they keep the fingerprint `seen`:
    after an fsync, so that the record never outlives their bytes."""
    for p in files:
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    if fingerprint(files) == seen:
        record = folder(digest) / f"{dtype}.verified"
        tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps([list(f) for f in seen]))
        os.replace(tmp, record)


def discard(where: Path, why: str) -> None:
    log.warning("converted weights %s are %s: removed, to be converted again", where, why)
    shutil.rmtree(where, ignore_errors=True)


class Converting(Mapping):
    """The GGUF's tensors passed through to the model as it asks for them, each also written, in
    the dtype the model converts it to, to its place in a safetensors file, and digested, on a
    thread of its own (os.pwrite and hashlib release the GIL) while the model takes the next."""

    fresh = True  # what it passes through is the GGUF's: a tensor of its own at each lookup

    def __init__(self, weights: Mapping[str, torch.Tensor], shapes: dict[str, tuple[int, ...]], dtype: torch.dtype,
                 raw: tuple[str, ...], path: Path) -> None:
        self._weights = weights
        # the raw (fp32) tensors first: every tensor then starts at a multiple of its element size
        self._names = sorted(shapes, key=lambda n: (n not in raw, n))
        self._dtypes = {n: torch.float32 if n in raw else dtype for n in self._names}
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for n in self._names:
            size = self._dtypes[n].itemsize * math.prod(shapes[n])
            header[n] = {"dtype": _NAMES[self._dtypes[n]], "shape": list(shapes[n]), "data_offsets": [offset,
                                                                                                     offset + size]}
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        self._head = struct.pack("<Q", len(text)) + text
        self._places = {n: len(self._head) + header[n]["data_offsets"][0] for n in self._names}
        self._asked: set[str] = set()
        self._digests: dict[str, bytes] = {}
        self._writes: list[Future] = []
        self._queued: deque[tuple[Future, int]] = deque()  # writes not yet known done, and their bytes
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="quail-convert")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(self._fd, len(self._head) + offset)
        self._put(self._head, 0)

    def __getitem__(self, name: str) -> torch.Tensor:
        t = self._weights[name]
        if name not in self._asked:
            self._write(name, t)
        return t

    def _write(self, name: str, t: torch.Tensor) -> None:
        t = t.to(self._dtypes[name]).contiguous()
        self._asked.add(name)
        while self._queued and sum(n for _, n in self._queued) + t.nbytes > QUEUED_BYTES:
            self._queued.popleft()[0].exception()  # waits for it; `finish` raises what it raised
        self._writes.append(self._pool.submit(self._digested, name, t))
        self._queued.append((self._writes[-1], t.nbytes))

    def _digested(self, name: str, t: torch.Tensor) -> None:
        data = t.view(torch.uint8).reshape(-1).numpy().data  # its bytes, flat: a short write resumes by bytes
        self._put(data, self._places[name])
        self._digests[name] = hashlib.sha256(data).digest()
        _write_back(self._fd, self._places[name], len(data))

    def _put(self, data: bytes | memoryview, at: int) -> None:
        view = memoryview(data)
        while view:  # one pwrite may write less than it was given
            done = os.pwrite(self._fd, view, at)
            view, at = view[done:], at + done

    def __iter__(self) -> Iterator[str]:
        return iter(self._weights)

    def __len__(self) -> int:
        return len(self._weights)

    def finish(self) -> str:
        """Writes the tensors the model did not ask for, closes the file and returns its digest
        (`weights_digest`)."""
        try:
            for name in self._names:
                if name not in self._asked:
                    self._write(name, self._weights[name])
            for future in self._writes:
                future.result()
            os.fdatasync(self._fd)
        finally:
            self.close()
        return hashlib.sha256(self._head + b"".join(self._digests[n] for n in self._names)).hexdigest()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)  # no write outlives the file's descriptor
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Writer:
    """Where one load writes a model's converted files: a temporary folder, whose files `commit`
    moves into the model's folder once the model's digest is known (the record last)."""

    def __init__(self, kept: Path, dtype: str) -> None:
        self.dtype = dtype
        self.tmp = kept / f".{dtype}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        self.tmp.mkdir(mode=0o700)
        self.file: Converting | None = None

    def converting(self, weights: Mapping[str, torch.Tensor], shapes: dict[str, tuple[int, ...]],
                   dtype: torch.dtype, raw: tuple[str, ...]) -> Converting:
        self.file = Converting(weights, shapes, dtype, raw, self.tmp / f"{self.dtype}.safetensors")
        return self.file

    def commit(self, digest: str, config: ModelConfig, tokenizer: Tokenizer) -> None:
        """Moves the files into the model's folder and marks them verified: they hold the bytes
        their writer digested, on disk (the weights synced as they were written), so the next load
        maps them without reading them twice. A file a crash left short has no record: converted again."""
        assert self.file is not None
        try:
            weights = self.file.finish()
            (self.tmp / _TOKENIZER).write_text(tokenizer.json())
            record = {"format": FORMAT, "digest": digest, "dtype": self.dtype, "config": dataclasses.asdict(config),
                      "weights_digest": weights, "tokenizer_sha256": file_sha256(self.tmp / _TOKENIZER)}
            (self.tmp / f"{self.dtype}.json").write_text(json.dumps(record, indent=1))
            final = folder(digest)
            final.mkdir(mode=0o700, exist_ok=True)
            # the tokenizer of a digest is one file, whichever dtype wrote it: equal bytes replace it
            for name in (f"{self.dtype}.safetensors", _TOKENIZER, f"{self.dtype}.json"):  # the record last
                os.replace(self.tmp / name, final / name)
            files = [final / f"{self.dtype}.safetensors", final / _TOKENIZER]
            _mark_verified(digest, self.dtype, files, fingerprint(files))
        except OSError as e:  # a full disk costs the next load its speed, never this one its model
            log.warning("converted weights of %s could not be kept: %s", digest[:12], e)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def abandon(self) -> None:
        if self.file is not None:
            self.file.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def disk_use() -> dict[str, int]:
    """Bytes each converted model's folder takes, by digest."""
    out: dict[str, int] = {}
    kept = root()
    for d in kept.iterdir() if kept is not None else []:
        if d.is_dir() and not d.name.startswith("."):
            out[d.name] = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
    return out


def prune(needed: set[str]) -> list[tuple[str, int]]:
    """Removes the converted models whose digest is not in `needed`, and what writers left behind;
    returns each removed folder's name and bytes."""
    removed = []
    kept = root()
    for d in kept.iterdir() if kept is not None else []:
        if d.name not in needed and d.name != DIGESTS:
            size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
            shutil.rmtree(d, ignore_errors=True)
            removed.append((d.name, size))
    return removed
