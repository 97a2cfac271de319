"""harness.core.compression against computations written out here (loops, formulas) and against
sentence-transformers' quantize_embeddings on the same inputs."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from harness.core.compression import (
    PRECISIONS,
    SIMILARITIES,
    Calibration,
    bytes_per_vector,
    calibrate,
    pair_similarity,
    parse_dims,
    quantize,
    similarity_for,
    truncate,
    unpack_bits,
)
from harness.core.errors import UserError


@functools.cache
def st_quantize():
    try:
        from sentence_transformers.util.quantization import quantize_embeddings
    except ImportError:  # sentence-transformers < 5 kept it in a module of its own
        from sentence_transformers.quantization import quantize_embeddings
    return quantize_embeddings


def vectors(n, d, seed, scale=1.0, dtype=np.float32):
    return (np.random.default_rng(seed).normal(size=(n, d)) * scale).astype(dtype)


def one_line_error(call, *args):
    with pytest.raises(UserError) as caught:
        call(*args)
    message = str(caught.value)
    assert "\n" not in message and message
    return message


# ---- dimensions ----------------------------------------------------------------------------------------------------

def test_parse_dims_keeps_order_and_drops_repeats():
    assert parse_dims(["full", "256", 64, "256", " FULL ", "0064"]) == (None, 256, 64)
    assert parse_dims([768]) == (768,)


@pytest.mark.parametrize("bad", ["0", 0, "-3", -3, "12.5", 12.5, "abc", "", True, None, "64,128"])
def test_parse_dims_refuses_what_is_not_a_positive_count(bad):
    message = one_line_error(parse_dims, [bad])
    assert message == f"--dims {bad}: expected a positive number of dimensions or full"


def test_parse_dims_refuses_nothing():
    assert one_line_error(parse_dims, []).startswith("--dims: expected at least one")


def test_truncate_keeps_the_first_k_dimensions():
    x = vectors(5, 12, 0)
    for k in (1, 7, 12):
        expected = np.array([[row[j] for j in range(k)] for row in x.tolist()], dtype=np.float32)
        assert np.array_equal(truncate(x, k), expected)
    assert truncate(x, None) is x


def test_truncate_refuses_more_dimensions_than_there_are():
    message = one_line_error(truncate, vectors(2, 12, 0), 16)
    assert message.startswith("--dims 16: the vectors have 12 dimensions") and "at most 12" in message
    assert one_line_error(truncate, vectors(2, 12, 0), 0) == (
        "--dims 0: expected a positive number of dimensions or full"
    )


def test_the_ranges_of_the_first_dimensions_are_those_of_the_truncated_vectors():
    cal_vectors = vectors(50, 20, 1)
    for k in (None, 1, 5, 20):
        truncated = calibrate(truncate(cal_vectors, k))
        first = calibrate(cal_vectors).first(k)
        assert np.array_equal(first.low, truncated.low) and np.array_equal(first.high, truncated.high)


# ---- precisions ----------------------------------------------------------------------------------------------------

def test_calibration_is_the_min_and_max_of_each_dimension():
    x = vectors(30, 6, 2, dtype=np.float64)
    cal = calibrate(x)
    columns = list(zip(*x.tolist()))
    assert cal.low.dtype == cal.high.dtype == np.float32
    assert cal.low.tolist() == [float(np.float32(min(c))) for c in columns]
    assert cal.high.tolist() == [float(np.float32(max(c))) for c in columns]


def scalar_quantize(x, cal_vectors, precision):
    """Element by element in float32 scalars: 255 steps between each dimension's min and max of the
    calibration vectors (a zero range: steps of 1), floored, clipped to 0..255, int8 128 lower."""
    out = []
    columns = list(zip(*cal_vectors.tolist()))
    for row in x.tolist():
        values = []
        for j, value in enumerate(row):
            low, high = np.float32(min(columns[j])), np.float32(max(columns[j]))
            step = (high - low) / np.float32(255)
            if step == 0:
                step = np.float32(1)
            q = min(max(math.floor((np.float32(value) - low) / step), 0), 255)
            values.append(q - 128 if precision == "int8" else q)
        out.append(values)
    return np.array(out, dtype=np.int8 if precision == "int8" else np.uint8)


def scalar_pack(x, precision):
    """The sign bits of each row, eight to a byte, first dimension in the high bit, zero padded."""
    out = []
    for row in x.tolist():
        bits = [1 if value > 0 else 0 for value in row]
        bits += [0] * (-len(bits) % 8)
        packed = [sum(bit << (7 - i) for i, bit in enumerate(bits[at:at + 8])) for at in range(0, len(bits), 8)]
        out.append([b - 128 for b in packed] if precision == "binary" else packed)
    return np.array(out, dtype=np.int8 if precision == "binary" else np.uint8)


def with_constant_dimension(cal_vectors):
    cal_vectors = cal_vectors.copy()
    cal_vectors[:, 3] = 0.25  # a dimension of zero range
    return cal_vectors


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_scalar_quantization_matches_the_formula_written_out(precision):
    cal_vectors = with_constant_dimension(vectors(40, 13, 3, scale=0.5))
    x = vectors(25, 13, 4)  # twice the spread of the calibration vectors: many values outside it
    q = quantize(x, precision, calibrate(cal_vectors))
    assert q.dtype == (np.int8 if precision == "int8" else np.uint8)
    assert np.array_equal(q, scalar_quantize(x, cal_vectors, precision))
    top = 127 if precision == "int8" else 255
    assert (q == top).sum() > 10 and (q == top - 255).sum() > 10  # saturated at both ends


@pytest.mark.parametrize("precision", ["binary", "ubinary"])
@pytest.mark.parametrize("d", [8, 13, 64])
def test_bits_match_the_packing_written_out(precision, d):
    x = vectors(20, d, 5)
    x[0, :] = 0.0  # 0 is not above 0
    q = quantize(x, precision)
    assert np.array_equal(q, scalar_pack(x, precision))
    assert np.array_equal(unpack_bits(q, precision, d), (x > 0).astype(np.uint8))


def st_clips():
    q = st_quantize()(np.array([[2.0, -1.0]], dtype=np.float32), "uint8", ranges=np.array([[0.0, 0.0], [1.0, 1.0]]))
    return q.tolist() == [[255, 0]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("precision", ["fp32", "int8", "uint8", "binary", "ubinary"])
@pytest.mark.parametrize("d", [13, 64])
def test_quantization_equals_sentence_transformers(precision, dtype, d):
    if precision.endswith("int8") and not st_clips():
        pytest.skip("this sentence-transformers predates clipping to the calibration range (its PR #3847)")
    cal_vectors = with_constant_dimension(vectors(60, d, 6, scale=0.5, dtype=dtype))
    x = vectors(30, d, 7, dtype=dtype)
    st_precision = "float32" if precision == "fp32" else precision
    expected = st_quantize()(x, precision=st_precision, calibration_embeddings=cal_vectors)
    ours = quantize(x, precision, calibrate(cal_vectors))
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    assert np.array_equal(ours, expected)
    if precision.endswith("int8"):
        assert not np.array_equal(ours, np.clip(ours, ours.min() + 1, ours.max() - 1))  # clipped values
        assert np.array_equal(quantize(cal_vectors, precision), st_quantize()(cal_vectors, precision=precision))


def test_sentence_transformers_published_example():
    # The example of sentence-transformers' PR #3847, which made out-of-range values saturate.
    cal = calibrate(np.array([[1, 20, -3], [4, 5, -60]], dtype=np.float32))
    assert quantize(np.array([[-1, 15, 1]], dtype=np.float32), "int8", cal).tolist() == [[-128, 42, 127]]


def test_fp32_is_float32_unchanged():
    x = vectors(4, 9, 8, dtype=np.float64)
    assert quantize(x, "fp32").dtype == np.float32 and np.array_equal(quantize(x, "fp32"), x.astype(np.float32))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("d", [1, 7, 8, 9, 384, 1000])
def test_bytes_per_vector(precision, d):
    per_dimension = {"fp32": 32, "int8": 8, "uint8": 8, "binary": 1, "ubinary": 1}[precision]
    assert bytes_per_vector(d, precision) == math.ceil(d * per_dimension / 8)
    assert bytes_per_vector(d, precision) == quantize(vectors(2, d, 9), precision)[0].nbytes


# ---- similarities --------------------------------------------------------------------------------------------------

def loop_similarity(x, y, similarity):
    out = []
    for u, v in zip(x.astype(np.float64).tolist(), y.astype(np.float64).tolist()):
        if similarity == "cosine":
            norm = math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v))
            out.append(0.0 if norm == 0 else sum(a * b for a, b in zip(u, v)) / norm)
        elif similarity == "dot":
            out.append(sum(a * b for a, b in zip(u, v)))
        elif similarity == "euclidean":
            out.append(-math.sqrt(sum((a - b) ** 2 for a, b in zip(u, v))))
        else:
            out.append(-sum(abs(a - b) for a, b in zip(u, v)))
    return np.array(out)


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("precision", ["fp32", "int8", "uint8"])
def test_similarities_match_loops(similarity, precision):
    cal = calibrate(vectors(80, 24, 10))
    x, y = vectors(40, 24, 11), vectors(40, 24, 12)
    x[3] = 0.0
    qx, qy = quantize(x, precision, cal), quantize(y, precision, cal)
    values, n_zero = pair_similarity(qx, qy, similarity, precision)
    assert values.dtype == np.float64
    assert np.allclose(values, loop_similarity(qx, qy, similarity), rtol=1e-12, atol=1e-9)
    # a zero fp32 vector has no direction: cosine 0, counted (int8/uint8 of 0.0 are not zero vectors)
    assert n_zero == (1 if similarity == "cosine" and precision == "fp32" else 0)
    if similarity == "cosine" and precision == "fp32":
        assert values[3] == 0.0


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("precision", ["binary", "ubinary"])
@pytest.mark.parametrize("d", [13, 64])
def test_bits_are_compared_by_hamming_distance_whatever_is_asked(similarity, precision, d):
    x, y = vectors(50, d, 13), vectors(50, d, 14)
    y[:10] = x[:10]  # some pairs equal
    y[10:20] = -x[10:20]  # some opposite
    differing = np.array([sum((a > 0) != (b > 0) for a, b in zip(u, v)) for u, v in zip(x.tolist(), y.tolist())])
    values, n_zero = pair_similarity(quantize(x, precision), quantize(y, precision), similarity, precision)
    assert np.array_equal(values, -differing.astype(np.float64)) and n_zero == 0
    assert similarity_for(precision, similarity) == "hamming"


def test_similarity_for_keeps_the_asked_similarity_on_numbers():
    for precision in ("fp32", "int8", "uint8"):
        assert [similarity_for(precision, s) for s in SIMILARITIES] == list(SIMILARITIES)


# ---- what is refused -----------------------------------------------------------------------------------------------

def test_unknown_names_are_one_line_user_errors():
    assert one_line_error(similarity_for, "int4", "cosine") == (
        "--precision int4: unknown precision (did you mean 'int8'?); choose among fp32, int8, uint8, binary, ubinary"
    )
    assert one_line_error(similarity_for, "fp32", "cosin").startswith(
        "--similarity cosin: not a similarity to ask for (did you mean 'cosine'?)"
    )
    assert "what binary and ubinary are compared by" in one_line_error(similarity_for, "binary", "hamming")
    one_line_error(quantize, vectors(3, 4, 0), "fp16")
    one_line_error(bytes_per_vector, 8, "bf16")
    assert one_line_error(bytes_per_vector, 0, "fp32").startswith("--dims 0:")


def test_calibration_needs_two_finite_vectors():
    one_line_error(calibrate, vectors(1, 4, 0))
    bad = vectors(5, 4, 0)
    bad[2, 1] = np.nan
    assert "1 values" in one_line_error(calibrate, bad)
    assert "1 values" in one_line_error(quantize, bad, "int8", calibrate(vectors(5, 4, 1)))


def test_mismatched_inputs_are_programming_errors():
    with pytest.raises(ValueError, match="calibration has 4 dimensions, the vectors 3"):
        quantize(vectors(2, 3, 0), "int8", calibrate(vectors(5, 4, 1)))
    with pytest.raises(ValueError, match="ubinary vectors are uint8, not int8"):
        pair_similarity(quantize(vectors(2, 9, 0), "binary"), quantize(vectors(2, 9, 1), "binary"), "dot", "ubinary")
    with pytest.raises(ValueError, match="int8 vectors are int8, not float32"):
        pair_similarity(vectors(2, 9, 0), vectors(2, 9, 1), "dot", "int8")
    with pytest.raises(ValueError, match="floating"):
        quantize(np.zeros((2, 3), dtype=np.int8), "int8")
    with pytest.raises(ValueError):
        Calibration(np.zeros(3), np.zeros(4))
