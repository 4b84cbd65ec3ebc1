"""The one-regime fast path of the timeline equals the per-bucket evaluation.

With one protocol regime every per-bucket cost is affine in the bucket's bytes,
and ``_core`` uses suffix sums of bucket counts and bytes instead of evaluating
each bucket; with several regimes it evaluates every bucket. Both must agree
to rounding for every architecture when the model is affine.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from costmodel import ARCHITECTURE_NAMES, bucket_table, get_architecture, get_workload, preset
from costmodel._timeline import WorkloadTerms, _core


@pytest.mark.parametrize("name", ARCHITECTURE_NAMES)
def test_affine_fast_path_equals_per_bucket_costs(name):
    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 32)
    wt = WorkloadTerms.from_workload(w)
    table = bucket_table(w, [2**16, 2**20, 25 * 2**20])
    arch = get_architecture(name)
    for u in range(3):
        sizes = table.sizes[u]
        s = jnp.asarray(sizes)
        weights = (s > 0).astype(s.dtype)
        counts = jnp.asarray(np.cumsum((sizes > 0)[::-1])[::-1].astype(np.float64))
        nbytes = jnp.asarray(np.cumsum(sizes[::-1])[::-1])
        for n, g in [(1.0, 1.0), (8.0, 1.0), (16.0, 4.0), (64.0, 8.0)]:
            f = jnp.asarray
            args = (
                p,
                arch,
                wt,
                s,
                weights,
                f(table.ready_frac[u]),
                f(n),
                f(g),
                f(2.0),
                f(32.0),
                f(32.0),
            )
            fast = _core(*args, False, (counts, nbytes))
            slow = _core(*args, False)
            for field in (
                "iteration_s",
                "communication_s",
                "exposed_communication_s",
                "num_buckets",
            ):
                assert float(getattr(fast, field)) == pytest.approx(
                    float(getattr(slow, field)), rel=1e-12, abs=1e-15
                ), (name, u, n, g, field)


def test_a_head_start_takes_the_per_bucket_path():
    """Costs with a shaper's head start are not affine in the bucket's bytes (a bucket
    under the head start crosses at once): the fast path is refused for them, and a
    bucket of ≤ b bytes costs less than the affine line through 0 and the whole
    gradient would charge it. The default (e^−30 bytes) keeps the fast path."""
    import equinox as eqx

    from costmodel import collective_time
    from costmodel._timeline import costs_are_affine

    p = preset("ethernet-10g", "v100")
    assert costs_are_affine(p)
    assert costs_are_affine(p.from_dict(p.to_dict()))
    b = 65536.0
    head = eqx.tree_at(lambda q: q.log_head_start, p, jnp.log(jnp.asarray([1e-13, b])))
    assert not costs_are_affine(head)
    s = np.asarray([0.0, b / 2, 100 * 2.0**20])
    t = np.asarray(collective_time(head, "all_reduce", s, 8, 1))
    line = t[0] + (t[2] - t[0]) * s / s[2]
    assert t[1] < line[1]
