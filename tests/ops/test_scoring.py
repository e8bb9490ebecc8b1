"""A label's score as the whole answer: the full-sequence log-probability, less, for a label that
begins another, the mass of going on towards the longer one."""

import math

import numpy as np

from quail.ops.scoring import label_probabilities, label_scores


def test_a_label_that_extends_another_can_win():
    # "news" = [3661], "news report" = [3661, 1378]: P(news) 0.6, P(report | news) 0.9
    labels = [[3661], [3661, 1378], [7807]]
    logprobs = [[math.log(0.6)], [math.log(0.6), math.log(0.9)], [math.log(0.3)]]
    p = label_probabilities(label_scores(labels, logprobs))
    np.testing.assert_allclose(p, np.array([0.06, 0.54, 0.3]) / 0.9)
    assert max(range(3), key=p.__getitem__) == 1


def test_nested_labels_each_keep_what_stops_there():
    labels = [[1], [1, 2], [1, 2, 3], [1, 4]]
    logprobs = [[math.log(0.8)], [math.log(0.8), math.log(0.5)], [math.log(0.8), math.log(0.5), math.log(0.25)],
                [math.log(0.8), math.log(0.3)]]
    scores = np.exp(label_scores(labels, logprobs))
    # [1] stops unless it goes on with 2 or 4; [1, 2] stops unless it goes on with 3
    np.testing.assert_allclose(scores, [0.8 * 0.2, 0.4 * 0.75, 0.1, 0.24])


def test_labels_that_begin_no_other_keep_their_full_sequence_score():
    labels = [[5], [6, 7], [6, 8, 9]]  # a shared first token, but no label begins another
    logprobs = [[-1.0], [-2.0, -0.5], [-2.0, -1.5, -0.25]]
    assert label_scores(labels, logprobs) == [-1.0, -2.5, -3.75]


def test_a_continuation_the_model_is_sure_of_leaves_the_shorter_label_nothing():
    p = label_probabilities(label_scores([[1], [1, 2]], [[-0.1], [-0.1, 0.0]]))
    assert p == [0.0, 1.0]
