"""Self-test of the comparison rules: they must reject what they are meant to reject."""

import numpy as np

from refcheck import greedy_check, kl_top1, logits_errors, safe_prefix


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


def test_kl_top1_is_zero_for_equal_rows_and_the_textbook_value_otherwise():
    a = np.array([[0.0, np.log(3.0)], [5.0, 1.0]])
    assert kl_top1(a, a) == (0.0, 1.0)
    b = np.array([[np.log(3.0), 0.0], [5.0, 1.0]])  # row 0: P = (1/4, 3/4) against Q = (3/4, 1/4)
    kl, top1 = kl_top1(a, b)
    want = (0.25 * np.log(0.25 / 0.75) + 0.75 * np.log(0.75 / 0.25)) / 2
    assert abs(kl - want) < 1e-12 and top1 == 0.5
