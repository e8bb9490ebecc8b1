"""runtime/blocking.py through `quail join`: a blocked join asks the pairs its mode says, each
asked pair's P(yes) is the full join's, its accounting holds, and its refusals come before any
model loads."""

import pytest

from quail.cli.main import main
from tests.runtime.conftest import CONDITION, LEFT, join


def _pairs(t):
    return {(lp, rp): p for lp, rp, p in zip(t.column("left_person").to_pylist(), t.column("right_person").to_pylist(),
                                             t.column("p_yes").to_pylist())}


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
def test_candidates_ask_each_left_rows_best_and_a_sample_and_answer_as_the_full_join(tmp_path, tables):
    full, _ = join(tmp_path, tables, "full", "--no-answer-store")
    blocked, stats = join(tmp_path, tables, "blocked", "--candidates", "2", "--no-answer-store")
    b = stats["blocking"]
    assert b["mode"] == "candidates" and b["pairs"] == 30
    assert b["asked_above"] == 2 * len(LEFT)
    assert b["sampled_below"] == min(30 - 12, 2 * len(LEFT))
    assert b["asked"] == b["asked_above"] + b["sampled_below"] <= 30
    low, high = b["recall_interval"]
    assert 0 <= low <= b["recall_estimate"] <= high == 1.0
    full_pairs, blocked_pairs = _pairs(full), _pairs(blocked)
    assert set(blocked_pairs) <= set(full_pairs)  # every pair it matched, the full join matched
    for pair, p in blocked_pairs.items():
        assert p == pytest.approx(full_pairs[pair], abs=1e-4)
    assert stats["tokens_computed"] + sum(stats["tokens_reused"].values()) == stats["tokens_naive"]


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
@pytest.mark.parametrize("target", ["1.0", "0.9"])
def test_a_target_that_certifying_cannot_beat_asks_every_pair_and_says_so(tmp_path, tables, target):
    full, _ = join(tmp_path, tables, "full", "--no-answer-store")
    blocked, stats = join(tmp_path, tables, "blocked", "--recall-target", target, "--no-answer-store")
    b = stats["blocking"]
    assert b["asked"] == b["pairs"] == 30 and b["recall_lower"] == 1.0 and b["why"]
    assert _pairs(blocked).keys() == _pairs(full).keys()


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
def test_a_blocked_join_predicts_its_vector_reads_and_a_rerun_finds_them_stored(tmp_path, tables):
    """Asking every pair (a target of 1), the prediction is the pairs' and each row's one read for its
    vector, to the token; a rerun predicts and finds every read and every pair in the answer store."""
    _, full = join(tmp_path, tables, "full", "--no-answer-store")
    _, first = join(tmp_path, tables, "first", "--recall-target", "1.0")
    _, again = join(tmp_path, tables, "again", "--recall-target", "1.0")
    reads = first["tokens_naive"] - full["tokens_naive"]  # each left and right row read once
    assert reads > 0 and first["predicted"]["tokens_naive"] == first["tokens_naive"]
    assert again["tokens_computed"] == 0 and again["predicted"]["tokens_computed"] == 0
    assert again["predicted"]["tokens_reused"]["store"] == again["tokens_reused"]["store"] == first["tokens_naive"]


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
def test_a_calibrated_blocked_join_probes_each_right_row_once_and_answers_as_the_full_join(tmp_path, tables):
    full, _ = join(tmp_path, tables, "full", "--calibration", "contextual", "--no-answer-store")
    blocked, stats = join(tmp_path, tables, "blocked", "--calibration", "contextual", "--candidates", "2",
                          "--no-answer-store")  # two asks: the candidates, then the sample of the rest
    for pair, p in _pairs(blocked).items():
        assert p == pytest.approx(_pairs(full)[pair], abs=1e-4)
    assert stats["blocking"]["asked"] < 30


@pytest.mark.parametrize("extra, match", [
    (["--recall-target", "0"], "recall_target must be in (0, 1]"),
    (["--recall-target", "1.5"], "recall_target must be in (0, 1]"),
    (["--recall-target", "nan"], "recall_target must be in (0, 1]"),
    (["--recall-target", "0.9", "--recall-delta", "1"], "recall_delta must be in (0, 1)"),
    (["--recall-target", "0.9", "--candidates", "3"], "give one"),
    (["--candidates", "0"], "candidates must be at least 1"),
    (["--embedding", "all-MiniLM-L6-v2"], "give recall_target or candidates too"),
])
def test_bad_blocking_settings_are_refused_before_any_model_loads(tmp_path, tables, capsys, monkeypatch, extra,
                                                                   match):
    monkeypatch.setattr("quail.session.load_model", lambda *a, **k: pytest.fail("a model loaded"))
    out = tmp_path / "o.parquet"
    with pytest.raises(SystemExit) as e:
        main(["join", str(tables[0]), str(tables[1]), "--left-column", "person", "--right-column", "person",
              "--condition", CONDITION, "--model", "smollm2-135m", "--output", str(out), *extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "quail: error:" in err and match in err and "Traceback" not in err, err
    assert not out.exists()


def test_recall_flags_belong_to_the_join(tmp_path, tables, capsys):
    with pytest.raises(SystemExit) as e:
        main(["filter", str(tables[0]), "--text-column", "person", "--predicate", "Born before 1970?",
              "--recall-target", "0.9", "--output", str(tmp_path / "o.parquet")])
    assert e.value.code == 2 and "--recall-target" in capsys.readouterr().err


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
def test_windows_each_block_their_part_and_their_reports_add_up(tmp_path, tables):
    whole, one = join(tmp_path, tables, "whole", "--candidates", "2", "--no-answer-store")
    parts, several = join(tmp_path, tables, "parts", "--candidates", "2", "--no-answer-store", "--window-rows", "4")
    b = several["blocking"]
    assert b["pairs"] == one["blocking"]["pairs"] == 30
    assert b["asked_above"] == 2 * len(LEFT)  # each left row's two best, whichever window it is in
    assert b["delta"] <= 0.05 and one["blocking"]["delta"] == 0.05
    for pair, p in _pairs(parts).items():  # a pair asked in both runs has one answer
        assert p == pytest.approx(_pairs(whole).get(pair, p), abs=1e-4)


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
def test_a_named_embedding_model_scores_the_pairs_instead_and_answers_the_same(tmp_path, tables):
    full, _ = join(tmp_path, tables, "full", "--no-answer-store")
    blocked, stats = join(tmp_path, tables, "embedded", "--candidates", "1", "--embedding", "all-MiniLM-L6-v2",
                          "--no-answer-store")
    b = stats["blocking"]
    assert b["embedding"] == "all-MiniLM-L6-v2" and b["asked_above"] == len(LEFT)
    for pair, p in _pairs(blocked).items():
        assert p == pytest.approx(_pairs(full)[pair], abs=1e-4)


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
def test_an_embedding_model_that_is_not_there_is_named_before_any_pair_is_asked(tmp_path, tables, capsys):
    with pytest.raises(SystemExit) as e:
        main(["join", str(tables[0]), str(tables[1]), "--left-column", "person", "--right-column", "person",
              "--condition", CONDITION, "--model", "smollm2-135m", "--candidates", "2", "--embedding",
              str(tmp_path / "no-such-model"), "--output", str(tmp_path / "o.parquet")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--embedding" in err and "no-such-model" in err and "Traceback" not in err, err
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.simulation
@pytest.mark.parametrize("target, delta", [(0.9, 0.05), (0.8, 0.1)])
def test_a_top_k_target_holds_over_seeds_against_a_simulated_oracle(target, delta):
    """The model's P(yes) of a pair is its score plus noise, so a row's top k lies beyond its best
    scores now and then; the share of left rows whose top k lies inside their candidates is at
    least the target in at least 1 - delta of the seeds."""
    import numpy as np

    from quail.kinds.join import ranked
    from quail.ops.candidates import VectorProduct
    from quail.runtime.blocking import _top_k

    rows, m, k, held = 400, 60, 2, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        left, right = rng.standard_normal((rows, 8)), rng.standard_normal((m, 8))
        product = VectorProduct(left, right)
        truth = product.score(np.arange(product.size)) + rng.normal(0, 0.05, product.size)
        p = 1 / (1 + np.exp(-4 * truth))
        p_of: dict[int, float] = {}

        def ask(ids, p=p, p_of=p_of):
            p_of.update((int(i), float(p[i])) for i in ids)
            return p[ids] >= 0.5

        report = _top_k(product, ask, p_of, k, 0.0, target, delta, seed)
        inside = 0
        for i in range(rows):
            top = {j for j, _ in ranked(p[i * m:(i + 1) * m].tolist(), 0.0, k)}
            inside += top <= {j for j in range(m) if i * m + j in p_of}
        held += inside / rows >= target
        assert k <= report["candidates"] <= m and report["recall_lower"] >= target
        assert len(p_of) < product.size / 2  # it asked fewer than half the pairs
    assert held >= (1 - delta) * 200


@pytest.mark.model
@pytest.mark.usefixtures("smollm2_for_every_session")
def test_a_top_k_target_on_a_small_table_samples_every_left_row_and_is_exact(tmp_path, tables):
    full, _ = join(tmp_path, tables, "full", "--top-k", "1", "--no-answer-store")
    blocked, stats = join(tmp_path, tables, "top", "--top-k", "1", "--recall-target", "0.9", "--no-answer-store")
    b = stats["blocking"]
    assert b["mode"] == "top-k" and b["sampled_rows"] == len(LEFT) and b["recall_lower"] == 1.0
    assert _pairs(blocked).keys() == _pairs(full).keys()
