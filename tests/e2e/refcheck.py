"""Comparison rules shared by the reference tests (pure numpy; unit-tested in test_refcheck.py)."""

import numpy as np


def logits_errors(ours, ref, rel_tol, scale=None, label="row"):
    """Rows where max|ours - ref| > rel_tol * scale (scale: max|ref| per row unless given).

    Returns a list of readable messages, empty when every row is within tolerance."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return [f"shape {ours.shape} != reference {ref.shape}"]
    if ours.ndim == 1:
        ours, ref = ours[None], ref[None]
    if scale is None:
        scale = np.abs(ref).max(axis=1)
    scale = np.asarray(scale, dtype=np.float64).reshape(-1)
    diff = np.abs(ours - ref).max(axis=1)
    errors = []
    for i in np.nonzero(~(diff <= rel_tol * scale))[0]:
        j = int(np.argmax(np.abs(ours[i] - ref[i])))
        errors.append(f"{label} {i}: max|diff| {diff[i]:.3e} > {rel_tol:g} x {scale[i]:.4g} "
                      f"(worst at id {j}: ours {ours[i, j]:.6g}, reference {ref[i, j]:.6g})")
    return errors


def safe_prefix(margins, max_abs, rel_tol, factor):
    """Leading greedy steps whose top-2 margin exceeds factor * rel_tol * max|logit|."""
    n = 0
    for m, a in zip(margins, max_abs):
        if not m > factor * rel_tol * a:
            break
        n += 1
    return n


def greedy_check(ours, ref, margins, max_abs, rel_tol, factor):
    """Compares greedy continuations step by step.

    While both agree the contexts stay identical, so comparison continues even past near-ties.
    The first disagreement is an error if the reference's top-2 margin at that step exceeds
    factor * rel_tol * max|logit| (a clear decision we got wrong), otherwise comparison stops
    there (a legitimate near-tie). Returns (number of tokens compared, error message or None)."""
    ours, ref = list(ours), list(ref)
    if len(ours) < len(ref):
        return 0, f"produced {len(ours)} tokens, expected {len(ref)}"
    for k, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            threshold = factor * rel_tol * max_abs[k]
            if margins[k] > threshold:
                return k, (f"step {k}: ours {a}, reference {b}; reference margin {margins[k]:.4g} > "
                           f"{threshold:.3g}; ours {ours[:k + 1]}, reference {ref[:k + 1]}")
            return k, None
    return len(ref), None


def log_softmax(x):
    """Row-wise log-softmax in float64."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def kl_top1(base, other):
    """Mean KL(P_base || P_other) over rows, and the fraction of rows with the same top-1."""
    lp, lq = log_softmax(base), log_softmax(other)
    kl = (np.exp(lp) * (lp - lq)).sum(axis=1)
    top1 = (np.argmax(base, axis=1) == np.argmax(other, axis=1)).mean()
    return float(kl.mean()), float(top1)
