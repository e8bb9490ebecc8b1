"""What a key holds: probabilities within [0, 1], or a written output; anything else stored under a
key is no answer, and is counted as rejected."""

import logging
from array import array

from quail.store import VECTOR, WRITTEN
from quail.store.signing import Signer
from quail.store.values import Rejected, as_answer, fits


def raw(*values: float) -> bytes:
    return array("d", values).tobytes()


def test_a_written_output_is_a_flag_then_whole_token_ids_and_nothing_else_passes():
    assert as_answer(raw(0.0, 12.0, 7.0), WRITTEN) == [0.0, 12.0, 7.0]
    assert as_answer(raw(1.0), WRITTEN) == [1.0]  # truncated before writing anything
    for planted in (raw(0.5, 3.0), raw(0.0, -1.0), raw(0.0, 2.5), raw(0.0, float("nan")), raw(1.0, 2.0**40), b"",
                    b"abc"):
        assert as_answer(planted, WRITTEN) is None
    assert as_answer(raw(0.0, 12.0), 2) is None  # a probability is at most 1


def test_a_vector_is_finite_numbers_of_any_sign_and_nothing_else_passes():
    assert as_answer(raw(-3.5, 0.25, 1e6), VECTOR) == [-3.5, 0.25, 1e6]
    for planted in (raw(0.5, float("nan")), raw(float("inf")), b"", b"abcdefghi"):
        assert as_answer(planted, VECTOR) is None
    assert as_answer(raw(-3.5), 1) is None  # a vector is no probability


def test_an_answer_fits_its_width_and_any_written_output_fits_writtens():
    assert fits([0.5], 1) and not fits([0.5], 2) and not fits([0.5, 0.5], 1)
    assert fits([0.0, 3.0, 4.0], WRITTEN) and fits([1.0], WRITTEN)
    assert fits([-3.5, 2.0], VECTOR) and not fits([], VECTOR)


def test_values_that_are_no_answer_are_counted_as_unsigned_or_damaged(caplog):
    caplog.set_level(logging.WARNING)
    signed_by = Signer(b"the secret of this worker")
    seen = Rejected()
    assert seen.checked(signed_by, b"k", signed_by.seal(b"k", raw(0.25)), 1) == [0.25]
    assert seen.checked(signed_by, b"k", raw(0.25) + bytes(16), 1) is None  # not signed
    assert seen.checked(signed_by, b"k", "0.25", 1) is None  # not bytes
    assert seen.checked(None, b"k", signed_by.seal(b"k", raw(0.25)), 1) is None  # a store that signs nothing
    assert seen.checked(signed_by, b"k", signed_by.seal(b"k", raw(2.0)), 1) is None  # signed, yet no probability
    assert (seen.unsigned, seen.damaged) == (3, 1)
    total = Rejected()
    total.add(seen, "a.sqlite", 1)
    total.add(seen, "a.sqlite", 1)
    assert total.stats(signed_by) == {"key": signed_by.fingerprint, "rejected_unsigned": 6, "rejected_damaged": 2}
    assert "3 value(s) not signed" in caplog.text
    assert "1 value(s) that are not answers (of 1 probabilities in [0, 1])" in caplog.text
