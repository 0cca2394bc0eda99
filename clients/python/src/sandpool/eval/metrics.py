"""pass@k: the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models Trained on Code"."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples, drawn from n with c correct, is correct: 1 - C(n-c,k)/C(n,k)."""
    if not 0 <= c <= n:
        raise ValueError(f"c: must be within 0..n={n}, got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k: must be within 1..n={n}, got {k}")
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials: C(n-c,k)/C(n,k) = prod_{i=n-c+1..n} (1 - k/i).
    p = 1.0
    for i in range(n - c + 1, n + 1):
        p *= 1.0 - k / i
    return 1.0 - p


def mean_pass_at_k(outcomes: Iterable[tuple[str, bool]], k: int) -> float:
    """pass@k averaged over tasks, from (task_id, passed) pairs; tasks with fewer than k samples are skipped."""
    per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task, passed in outcomes:
        per_task[task][0] += 1
        per_task[task][1] += int(passed)
    scores = [pass_at_k(n, c, k) for n, c in per_task.values() if n >= k]
    if not scores:
        raise ValueError(f"k: no task has {k} or more samples")
    return sum(scores) / len(scores)
