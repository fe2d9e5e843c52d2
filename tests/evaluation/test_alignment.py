import math

import numpy as np
import pytest

from contrastive_sentence_embeddings.evaluation.alignment import alignment, alignment_uniformity, uniformity
from contrastive_sentence_embeddings.evaluation.sts import StsSubset


def test_alignment_by_hand():
    left = np.array([[2.0, 0.0], [0.0, 1.0]])
    right = np.array([[0.0, 3.0], [0.0, 5.0]])
    # normalised: (1,0)-(0,1) has squared norm 2; (0,1)-(0,1) has 0 -> mean 1
    assert alignment(left, right) == pytest.approx(1.0)


def test_uniformity_by_hand():
    points = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # squared distances: 2, 4, 2 -> log(mean(exp(-4), exp(-8), exp(-4)))
    expected = math.log((2 * math.exp(-4) + math.exp(-8)) / 3)
    assert uniformity(points) == pytest.approx(expected)
    # scale does not matter (normalised first), and a collapsed space is the least uniform (0)
    assert uniformity(points * 7) == pytest.approx(expected)
    assert uniformity(np.ones((4, 3))) == pytest.approx(0.0)


def test_alignment_uniformity_uses_only_pairs_above_the_threshold():
    subset = StsSubset("STSB", "test", ["a", "b"], ["c", "d"], np.array([4.5, 4.0]))
    vectors = {"a": np.array([1.0, 0]), "c": np.array([1.0, 0]), "b": np.array([0, 1.0]), "d": np.array([-1.0, 0])}
    result = alignment_uniformity(subset, vectors)
    assert result["alignment"] == pytest.approx(0.0)  # only (a, c) is above 4
    with pytest.raises(ValueError, match="no pair scored above 4.6"):
        alignment_uniformity(subset, vectors, min_score=4.6)
