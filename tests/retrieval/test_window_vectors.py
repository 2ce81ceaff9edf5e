"""The window list's vectors, made from the items' own (no second run of the model)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from cognoxium.retrieval.embeddings import get_embedder
from cognoxium.retrieval.scope import WINDOW_WEIGHT_CHARS, window_texts, window_vectors

DIALOGUE = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That sounds amazing! What happened there?",
    "Caroline: People shared their transgender stories; I felt accepted.",
    "Melanie: I'm so glad. Did you meet anyone new?",
    "Caroline: Yes, a counsellor who told me about an adoption agency.",
    "Melanie: Oh, are you thinking about adopting?",
    "Caroline: I am. I want to give a kid a loving home.",
    "Melanie: You'd be a wonderful mom. I painted a lake sunrise last week, by the way.",
    "Caroline: I'd love to see it! Do you paint often?",
    "Melanie: Most weekends. Pottery too, I took a class with my kids.",
    "Caroline: What did you make?",
    "Melanie: A bowl and a little mug for my husband.",
]


def test_each_window_is_the_length_weighted_mean_of_its_two_vectors() -> None:
    vectors = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=np.float32)
    texts = pl.Series(["ab", "abcd", "x" * (3 * WINDOW_WEIGHT_CHARS), "abc"])
    windows = window_vectors(vectors, texts)
    weights = [2, 4, WINDOW_WEIGHT_CHARS, 3]  # a long text weighs what the model reads of it
    expected = [vectors[0]] + [
        weights[i - 1] * vectors[i - 1] + weights[i] * vectors[i] for i in range(1, 4)
    ]
    expected = [row / np.linalg.norm(row) for row in expected]
    np.testing.assert_allclose(windows, np.array(expected), rtol=1e-6)
    assert windows.dtype == np.float32


def test_empty_texts_and_zero_vectors_give_no_nan() -> None:
    vectors = np.array([[0, 0], [0, 0], [0, 1]], dtype=np.float32)
    windows = window_vectors(vectors, pl.Series(["", None, "a"], dtype=pl.String))
    assert windows.tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
    assert window_vectors(np.zeros((0, 4), np.float32), pl.Series([], dtype=pl.String)).shape == (
        0,
        4,
    )


@pytest.fixture(scope="module")
def dialogue_vectors() -> tuple[np.ndarray, np.ndarray]:
    model = get_embedder("minilm")
    texts = pl.Series(DIALOGUE)
    approximate = window_vectors(model.embed(DIALOGUE), texts)
    read = model.embed(window_texts(texts).to_list())
    return approximate, read


def test_a_made_window_points_where_the_model_reading_the_joined_turns_does(
    dialogue_vectors: tuple[np.ndarray, np.ndarray],
) -> None:
    approximate, read = dialogue_vectors
    cosines = (approximate * read).sum(axis=1)
    assert cosines[0] == pytest.approx(1.0)  # the first window is its own turn
    assert cosines.min() > 0.85
    assert cosines.mean() > 0.93
    # And closer to the joined reading than either turn alone is.
    alone = (get_embedder("minilm").embed(DIALOGUE) * read).sum(axis=1)
    assert (cosines[1:] > alone[1:] - 1e-6).mean() > 0.8
