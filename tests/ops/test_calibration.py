"""Contextual calibration: its arithmetic, its determinism and invariance to reuse (fp32, 1e-4),
its cost counted like any other prompts, its raw values beside the calibrated ones, and a model
whose tokenizer has no yes/no answer (a clear error for a filter; a classify still runs)."""

import dataclasses
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.errors import QuailError
from quail.executor.engine import PhysicalSettings
from quail.model.registry import EMBEDDED
from quail.ops.calibration import labels_given, yes_given
from quail.session import Session

TEXTS = ["The striker scored twice in the derby.", "Rates rose again.", "The keeper saved a penalty.",
         "A new phone chip."]
HEADLINES = ["Derby goals", "Bank rates", "Chip news"]


def test_the_arithmetic_divides_the_content_free_answer_out():
    assert yes_given(0.7, 0.5) == pytest.approx(0.7)  # no lean: nothing changes
    assert yes_given(0.8, 0.8) == pytest.approx(0.5)  # the content-free answer itself: undecided
    assert yes_given(0.9, 0.8) > 0.5 > yes_given(0.7, 0.8)  # above or below the lean
    assert labels_given([0.5, 0.3, 0.2], [0.5, 0.3, 0.2]) == pytest.approx([1 / 3] * 3)
    assert sum(labels_given([0.6, 0.3, 0.1], [0.2, 0.5, 0.3])) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def sessions(smollm2):
    return [Session(smollm2, PhysicalSettings(arena_pages=256, max_batch_tokens=512)) for _ in range(2)]


def test_calibrated_answers_are_deterministic_and_equal_with_and_without_reuse(sessions):
    a, b = sessions
    f1, fs1 = a.filter(TEXTS, ["Is this about sport?", "Is a goal mentioned?"], 0.0, calibration="contextual")
    f2, _ = b.filter(TEXTS, ["Is this about sport?", "Is a goal mentioned?"], 0.0, reuse=False,
                     calibration="contextual")
    raw, raw_stats = a.filter(TEXTS, ["Is this about sport?", "Is a goal mentioned?"], 0.0)
    flat = lambda rows: [p for row in rows for p in row]
    assert flat(f1.p_yes) == pytest.approx(flat(f2.p_yes), abs=1e-4)
    assert flat(f1.raw_p_yes) == pytest.approx(flat(raw.p_yes), abs=1e-4)  # the raw values are kept beside
    assert max(abs(x - y) for x, y in zip(flat(f1.p_yes), flat(raw.p_yes))) > 1e-3  # and calibration moved them
    assert fs1.tokens_naive > raw_stats.tokens_naive  # the content-free prompts are counted
    c1, _ = a.classify(TEXTS, ["sport", "money", "tech"], calibration="contextual")
    c2, _ = b.classify(TEXTS, ["sport", "money", "tech"], reuse=False, calibration="contextual")
    assert flat(c1.probabilities) == pytest.approx(flat(c2.probabilities), abs=1e-4)
    assert all(sum(p) == pytest.approx(1.0) for p in c1.probabilities)
    j1, _ = a.join(TEXTS, HEADLINES, "The headline fits the article.", calibration="contextual")
    j2, _ = b.join(TEXTS, HEADLINES, "The headline fits the article.", reuse=False, calibration="contextual")
    assert flat(j1.p_yes) == pytest.approx(flat(j2.p_yes), abs=1e-4)
    again, _ = a.join(TEXTS, HEADLINES, "The headline fits the article.", calibration="contextual")
    assert flat(again.p_yes) == pytest.approx(flat(j1.p_yes), abs=1e-6)


def test_a_tokenizer_without_yes_and_no_cannot_filter_but_can_classify(tiny_llama):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from quail.model.loader import LoadedModel
    from quail.model.tokenizer import Tokenizer

    words = ["[UNK]", "Document", ":", "Question", "Answer", "sport", "money", "goal", "rates", "?", "."]
    hf = HFTokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    hf.pre_tokenizer = Whitespace()
    s = Session(LoadedModel("tiny", tiny_llama.cfg, tiny_llama, Tokenizer(hf)), PhysicalSettings(64, 128))
    r, _ = s.classify(["goal goal", "rates"], ["sport", "money"], calibration="contextual")
    assert len(r.labels) == 2
    with pytest.raises(QuailError, match="no single token for 'yes'"):
        s.filter(["goal"], ["sport?"], calibration="contextual")


@pytest.mark.usefixtures("smollm2_for_every_session")
def test_the_cli_keeps_the_raw_values_beside_the_calibrated_ones(tmp_path, capsys):
    pq.write_table(pa.table({"text": TEXTS}), tmp_path / "n.parquet")
    out = tmp_path / "o.parquet"
    base = ["filter", str(tmp_path / "n.parquet"), "--text-column", "text", "--predicate", "Sport?",
            "--keep-all", "--output", str(out), "--model", "smollm2-135m", "--dtype", "float32"]
    with pytest.raises(SystemExit) as e:
        main(base + ["--calibration", "contextual"])
    assert e.value.code == 0
    assert pq.read_table(out).column_names == ["text", "passed", "p_yes_1", "p_yes_raw_1"]
    with pytest.raises(SystemExit) as e:
        main(base + ["--calibration", "platt"])
    assert e.value.code == 2 and "invalid choice: 'platt'" in capsys.readouterr().err


@pytest.mark.usefixtures("smollm2_for_every_session")
@pytest.mark.parametrize("argv", [
    ["classify", "n.parquet", "--text-column", "text", "--label", "sport", "--label", "money"],
    ["join", "n.parquet", "h.parquet", "--left-column", "text", "--right-column", "headline",
     "--condition", "The headline is the title of the document."],
])
def test_the_content_free_prompts_are_predicted_exactly(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"text": TEXTS}), "n.parquet")
    pq.write_table(pa.table({"headline": HEADLINES}), "h.parquet")
    seen = {}
    for calibration in ("none", "contextual"):
        with pytest.raises(SystemExit) as e:
            main(argv + ["--calibration", calibration, "--output", "o.parquet", "--stats", f"{calibration}.json",
                         "--window-rows", "2", "--model", "smollm2-135m", "--dtype", "float32"])
        assert e.value.code == 0
        seen[calibration] = s = json.loads((tmp_path / f"{calibration}.json").read_text())
        assert s["predicted"] == {"tokens_naive": s["tokens_naive"], "tokens_computed": s["tokens_computed"],
                                  "tokens_reused": s["tokens_reused"]}
    assert seen["contextual"]["tokens_computed"] > seen["none"]["tokens_computed"]  # two windows, probed twice


@pytest.mark.usefixtures("smollm2_for_every_session")
def test_auto_is_the_calibration_the_registry_gives_the_model(tmp_path, monkeypatch):
    pq.write_table(pa.table({"text": TEXTS}), tmp_path / "n.parquet")

    def run(*calibration) -> pa.Table:
        with pytest.raises(SystemExit) as e:
            main(["filter", str(tmp_path / "n.parquet"), "--text-column", "text", "--predicate", "Sport?",
                  "--keep-all", "--output", str(tmp_path / "o.parquet"), "--model", "smollm2-135m", "--dtype",
                  "float32", *calibration])
        assert e.value.code == 0
        return pq.read_table(tmp_path / "o.parquet")

    def same(a, b):
        assert a.column_names == b.column_names
        for name in a.column_names:
            assert a.column(name).to_pylist() == pytest.approx(b.column(name).to_pylist(), abs=1e-6), name

    assert EMBEDDED["smollm2-135m"].calibration == "none"  # never measured: it is at chance on yes/no
    same(run(), run("--calibration", "none"))
    monkeypatch.setitem(EMBEDDED, "smollm2-135m", dataclasses.replace(EMBEDDED["smollm2-135m"],
                                                                       calibration="contextual"))
    auto = run()
    assert auto.column_names == ["text", "passed", "p_yes_1", "p_yes_raw_1"]
    same(auto, run("--calibration", "contextual"))
