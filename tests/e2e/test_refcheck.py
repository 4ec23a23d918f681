"""Self-test of the comparison rules: they must reject what they are meant to reject."""

import numpy as np

from refcheck import greedy_check, logits_errors, safe_prefix


def test_logits_within_tolerance_pass():
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 4, (3, 50)).astype(np.float32)
    ours = ref + 0.5e-4 * np.abs(ref).max(axis=1, keepdims=True)
    assert logits_errors(ours, ref, 1e-4) == []


def test_logits_outside_tolerance_fail_per_row():
    rng = np.random.default_rng(1)
    ref = rng.normal(0, 4, (3, 50))
    ours = ref.copy()
    ours[1, 7] += 2e-4 * np.abs(ref[1]).max()
    errors = logits_errors(ours, ref, 1e-4)
    assert len(errors) == 1 and errors[0].startswith("row 1") and "id 7" in errors[0]


def test_logits_shape_mismatch_and_nan_fail():
    ref = np.ones((2, 5))
    assert logits_errors(np.ones((2, 4)), ref, 1e-4)
    bad = ref.copy()
    bad[0, 0] = np.nan
    assert logits_errors(bad, ref, 1e-4)


def test_logits_explicit_scale():
    ref = np.array([[10.0, 0.0]])
    ours = np.array([[10.0, 0.005]])
    assert logits_errors(ours, ref, 1e-3, scale=[10.0]) == []
    assert logits_errors(ours, ref, 1e-3, scale=[1.0])


def test_greedy_equal():
    assert greedy_check([1, 2, 3], [1, 2, 3], [1, 1, 1], [5, 5, 5], 1e-4, 10) == (3, None)


def test_greedy_clear_mismatch_fails():
    n, err = greedy_check([1, 9, 3], [1, 2, 3], [1, 1, 1], [5, 5, 5], 1e-4, 10)
    assert n == 1 and err and "step 1" in err


def test_greedy_near_tie_mismatch_stops():
    # margin 1e-3 <= 10 * 1e-4 * 5 = 5e-3: a legitimate near-tie, later tokens not compared.
    assert greedy_check([1, 9, 7], [1, 2, 3], [1, 1e-3, 1], [5, 5, 5], 1e-4, 10) == (1, None)


def test_greedy_agreement_through_near_tie_continues():
    n, err = greedy_check([1, 2, 8], [1, 2, 3], [1, 1e-3, 1], [5, 5, 5], 1e-4, 10)
    assert n == 2 and err and "step 2" in err


def test_greedy_too_short_fails():
    n, err = greedy_check([1, 2], [1, 2, 3], [1, 1, 1], [5, 5, 5], 1e-4, 10)
    assert err


def test_safe_prefix():
    assert safe_prefix([1, 1, 1e-3, 1], [5, 5, 5, 5], 1e-4, 10) == 2
    assert safe_prefix([1, 1], [5, 5], 1e-4, 10) == 2
