"""model/converted.py and the digest record (model/identity.py): a GGUF model's first load keeps its
converted weights, later loads map them and read nothing of the GGUF, and a damaged copy or a
changed file is never used."""

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch

from quail.cli.main import main
from quail.model import converted
from quail.model.identity import digests_folder, model_files, recorded_digest
from quail.model.loader import load_model
from quail.model.registry import embedded_path

pytestmark = pytest.mark.model  # loads smollm2 from a copy of its GGUF


@pytest.fixture
def gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QUAIL_CONVERTED_WEIGHTS")  # the home's own folder, not the run's (tests/conftest.py)
    path = tmp_path / "models" / "smollm2.gguf"
    path.parent.mkdir()
    shutil.copyfile(embedded_path("smollm2-135m"), path)
    return path


def _tensors(loaded) -> list[torch.Tensor]:
    m = loaded.model
    out = [m.embed, m.norm, m.lm_head, m.inv_freq]
    for layer in m.layers:
        out += [layer.attn_norm, layer.mlp_norm, layer.qkv.weight, layer.qkv.bias, layer.o.weight,
                layer.gate_up.weight, layer.down.weight]
    return [t for t in out if t is not None]


def _same(a, b) -> bool:
    return a.identity == b.identity and a.config == b.config and all(
        torch.equal(x, y) for x, y in zip(_tensors(a), _tensors(b), strict=True))


def _no_gguf(monkeypatch):
    def refuse(path):
        raise AssertionError(f"the GGUF {path} was read")

    monkeypatch.setattr("quail.model.gguf_loader.load_gguf", refuse)


def test_a_second_load_maps_the_converted_weights_and_reads_no_gguf(gguf, monkeypatch):
    files = model_files(gguf)
    assert recorded_digest(gguf, files) is None
    first = load_model(str(gguf), "float32")
    assert recorded_digest(gguf, files) == first.digest
    files = sorted(p.name for p in converted.folder(first.digest).iterdir())
    assert files == ["float32.json", "float32.safetensors", "float32.verified", "tokenizer.json"]
    assert not [p for p in converted.root().iterdir() if p.name.startswith(".")]  # the writer's folder went
    with monkeypatch.context() as m:
        _no_gguf(m)
        second = load_model(str(gguf), "float32")
    assert _same(first, second)
    text = "Hello <|im_end|> wörld, 12345 tokens"
    assert first.tokenizer.encode(text) == second.tokenizer.encode(text)
    assert first.tokenizer.chat == second.tokenizer.chat and first.tokenizer.stop_ids == second.tokenizer.stop_ids


def test_a_full_disk_costs_a_converting_load_its_copy_not_its_model_and_torch_its_threads_back(gguf, monkeypatch,
                                                                                               caplog):
    first = load_model(str(gguf), "float32", defer=False)
    shutil.rmtree(converted.root())
    during = []

    def full(self, name, t):
        during.append(torch.get_num_threads())
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(converted.Converting, "_digested", full)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with caplog.at_level(logging.WARNING, "quail.model.converted"):
            again = load_model(str(gguf), "float32")
        assert torch.get_num_threads() == 2 and set(during) == {1}  # the writing thread had a core of its own
    finally:
        torch.set_num_threads(threads)
    assert _same(first, again) and "could not be kept: [Errno 28] No space left" in caplog.text
    assert converted.disk_use() == {} and not [p for p in converted.root().iterdir() if p.name.startswith(".")]


def test_short_writes_resume_where_they_stopped(gguf, monkeypatch):
    real = os.pwrite
    monkeypatch.setattr(converted.os, "pwrite", lambda fd, data, at: real(fd, memoryview(data)[:(1 << 20) + 1], at))
    first = load_model(str(gguf), "float32")
    monkeypatch.setattr(converted.os, "pwrite", real)
    _no_gguf(monkeypatch)
    assert _same(first, load_model(str(gguf), "float32"))  # mapped: every byte where its digest says


def test_homes_that_share_converted_weights_share_the_digests_that_find_them(gguf, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QUAIL_CONVERTED_WEIGHTS", str(tmp_path / "shared"))
    first = load_model(str(gguf), "float32")
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "another-home"))  # a test's, a user's second home
    _no_gguf(monkeypatch)
    second = load_model(str(gguf), "float32")
    assert not second.model.weights_loaded and second.digest == first.digest
    assert _same(first, second)
    with pytest.raises(SystemExit):
        main(["models", "prune"])
    assert "freed 0.00 GiB" in capsys.readouterr().out and (tmp_path / "shared" / ".digests").is_dir()


def test_a_load_reads_no_weight_until_one_is_used_and_then_the_same(gguf):
    first = load_model(str(gguf), "float32")
    assert first.model.weights_loaded  # converted as it loaded
    second = load_model(str(gguf), "float32")
    assert not second.model.weights_loaded and second.identity == first.identity
    assert second.model.nbytes == first.model.nbytes  # the arena is sized as for the weights read
    assert _same(first, second) and second.model.weights_loaded


def test_weights_gone_after_the_load_are_converted_again_at_their_first_use(gguf):
    first = load_model(str(gguf), "float32")
    second = load_model(str(gguf), "float32")
    shutil.rmtree(converted.folder(first.digest))
    assert _same(first, second)
    assert sorted(p.name for p in converted.folder(first.digest).iterdir()) == [
        "float32.json", "float32.safetensors", "float32.verified", "tokenizer.json"]


def test_a_rerun_whose_answers_are_all_stored_reads_no_weight(gguf, tmp_path, monkeypatch):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "reviews.parquet"
    pq.write_table(pa.table({"text": ["The battery died.", "Works perfectly.", "The screen cracked."]}), table)

    def run(name):
        with pytest.raises(SystemExit) as e:
            main(["filter", str(table), "--text-column", "text", "--predicate", "Is the customer unhappy?",
                  "--keep-all", "--model", str(gguf), "--dtype", "float32",
                  "--output", str(tmp_path / f"{name}.parquet"), "--stats", str(tmp_path / f"{name}.json")])
        assert e.value.code == 0
        return pq.read_table(tmp_path / f"{name}.parquet"), json.loads((tmp_path / f"{name}.json").read_text())

    first, _ = run("first")

    def refuse(*args, **kwargs):
        raise AssertionError("a weight was read")

    monkeypatch.setattr("quail.model.loader._mapped", refuse)
    _no_gguf(monkeypatch)
    again, stats = run("again")
    assert stats["tokens_computed"] == 0 and stats["tokens_reused"]["store"] == stats["tokens_naive"] > 0
    assert again.equals(first)


def test_checked_weights_are_not_hashed_again_while_their_file_is_unchanged(gguf, monkeypatch):
    hashed, real = [], converted.weights_digest
    monkeypatch.setattr("quail.model.converted.weights_digest", lambda p: hashed.append(p.suffix) or real(p))
    first = load_model(str(gguf), "float32")
    # their writer digested the bytes it wrote, and synced them: the next load does not read them twice
    assert _same(first, load_model(str(gguf), "float32")) and ".safetensors" not in hashed
    weights = converted.folder(first.digest) / "float32.safetensors"
    os.utime(weights)  # any change to the file: checked again
    assert _same(first, load_model(str(gguf), "float32")) and ".safetensors" in hashed


def test_a_files_digest_is_computed_again_once_anything_changes_it(gguf):
    files = model_files(gguf)
    loaded = load_model(str(gguf), "float32")
    assert recorded_digest(gguf, files) == loaded.digest
    st = gguf.stat()
    os.utime(gguf, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same size and times; a new ctime
    assert recorded_digest(gguf, files) is None
    copy = gguf.with_name("copy.gguf")
    shutil.copy2(gguf, copy)  # `cp -p`: another file with the same size and times
    assert recorded_digest(copy, model_files(copy)) is None
    [record] = [r for r in digests_folder().glob("*.json") if json.loads(r.read_text())["path"] == str(gguf.resolve())]
    for garbage in ("[1, 2]", "{not json", '{"fingerprint": 7}'):
        record.write_text(garbage)
        assert recorded_digest(gguf, files) is None


def _flip_a_byte(path):
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x40]))


def test_damaged_converted_weights_are_never_used_but_converted_again(gguf, monkeypatch, caplog):
    first = load_model(str(gguf), "float32")
    weights = converted.folder(first.digest) / "float32.safetensors"
    for damage in (_flip_a_byte, lambda path: os.truncate(path, path.stat().st_size - 4096),
                   lambda path: os.truncate(path, path.stat().st_size + 8)):  # a byte past the last tensor
        damage(weights)
        caplog.clear()
        with caplog.at_level(logging.WARNING, "quail.model.converted"):
            again = load_model(str(gguf), "float32")
        assert _same(first, again)  # as loaded from the GGUF, not from the damaged copy
        assert "removed, to be converted again" in caplog.text
    with monkeypatch.context() as m:  # and the copy was written anew
        _no_gguf(m)
        assert _same(first, load_model(str(gguf), "float32"))


def test_models_list_counts_the_disk_and_prune_removes_what_no_model_needs(gguf, capsys):
    load_model(str(gguf), "float32")
    leftover = converted.root() / ".float32.1.dead.tmp"  # a writer killed halfway
    leftover.mkdir()
    with pytest.raises(SystemExit):
        main(["models", "list"])
    out = capsys.readouterr().out
    assert "converted weights: 0.5" in out and str(gguf) in out
    with pytest.raises(SystemExit):
        main(["models", "prune"])
    assert "freed 0.00 GiB" in capsys.readouterr().out and not leftover.exists()
    assert len(converted.disk_use()) == 1  # the model's own stays
    gguf.unlink()
    with pytest.raises(SystemExit):
        main(["models", "prune"])
    assert "freed 0.5" in capsys.readouterr().out and converted.disk_use() == {}
