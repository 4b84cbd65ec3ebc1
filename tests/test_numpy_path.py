"""One implementation, two namespaces: the numpy evaluation equals the jitted jax one.

The cost model's closed forms run in numpy for concrete parameters (sweeps,
predictions, intervals, draws, refinement, reports: nothing compiled) and in
jax.numpy under tracing (calibration, gradients). These tests compare the two
on a grid of architectures × workloads × presets and on a "fitted" profile
(every parameter moved off its preset, three protocol regimes), in float64.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from calibration import Profile
from costmodel import (
    ARCHITECTURE_NAMES,
    Breakdown,
    bucket_schedule,
    fluid_iteration_time,
    get_workload,
    iteration_time,
    preset,
)
from tuner._search import TimeSpec, Variant, spec_times, spec_times_draws

MULTI = ("ps_host", "hybrid", "hierarchical", "hsdp")


def _fitted(n_regimes: int, seed: int = 0):
    """A preset with every unconstrained leaf moved at random (as a fit would)."""
    p = preset("ib-hdr-200g", "a100", n_regimes=n_regimes)
    theta = p.flat()
    rng = np.random.default_rng(seed)
    return p.from_flat(theta + rng.normal(0.0, 0.3, theta.size)), p


def _grid(arch):
    g = 4 if arch in MULTI else 1
    n, b = np.meshgrid([g, 2 * g, 8 * g, 64 * g], [0.0, 2.0**20, 25 * 2.0**20, 2.0**30])
    n, b = n.ravel(), b.ravel()
    return dict(workers=n, ranks_per_node=g, servers=np.minimum(n, 4), bucket_bytes=b)


def _params_sets():
    pre = preset("ethernet-10g", "v100")
    out = [("ethernet-10g:v100", pre)]
    # latency under the transfer (d = 0.5, 0.8): costs not affine, the per-cap path
    overlapped = eqx.tree_at(lambda p: p.logit_latency_overlap, pre, jnp.asarray([0.0, 1.4]))
    out.append(("ethernet-10g:v100 overlapped", overlapped))
    # a shaper's head start (4 KiB inside a node, 64 KiB across): not affine either
    head = eqx.tree_at(lambda p: p.log_head_start, pre, jnp.log(jnp.asarray([4096.0, 65536.0])))
    out.append(("ethernet-10g:v100 head start", head))
    # all_to_all's congestion under a ceiling that binds (e = 1, c = 0.3): p2p's exchange
    capped = eqx.tree_at(
        lambda p: (p.log_all_to_all, p.log_all_to_all_cap), pre, (jnp.asarray(0.0), jnp.log(0.3))
    )
    out.append(("ethernet-10g:v100 all_to_all ceiling", capped))
    # a cache inside a node (bytes beyond 1 MiB at 2.5× the cost): not affine either
    cache = eqx.tree_at(
        lambda p: (p.log_cache_bytes, p.log_cache_excess),
        pre,
        (jnp.log(jnp.asarray([2.0**20, 1e13])), jnp.log(jnp.asarray([1.5, 1e-13]))),
    )
    out.append(("ethernet-10g:v100 cache", cache))
    # small GEMMs below the rate (the CPU preset's m½ = 16): the numpy path's one
    # evaluation of the GEMM term per batch size against the traced one per configuration
    out.append(("ethernet-10g:cpu", preset("ethernet-10g", "cpu")))
    for r in (1, 3):
        fitted, _ = _fitted(r)
        out.append((f"fitted-{r}-regimes", jax.tree_util.tree_map(jnp.asarray, fitted)))
    return out


#: Every architecture on a CNN; one of each family on a transformer.
_CASES = [(a, "resnet50") for a in ARCHITECTURE_NAMES] + [
    (a, "bert_base") for a in ("ring", "ps", "zero2", "fsdp", "hsdp")
]


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "workload"), _CASES)
def test_numpy_sweep_equals_jitted_sweep(arch, workload):
    w = get_workload(workload)
    kw = _grid(arch)
    workers = kw.pop("workers")
    jitted = jax.jit(lambda p: iteration_time(p, w, arch, workers, **kw))
    for label, params in _params_sets():
        out_np = iteration_time(params, w, arch, workers, **kw)
        out_jx = jitted(params)
        for f in Breakdown.FIELDS:
            x = getattr(out_np, f)
            y = np.asarray(getattr(out_jx, f))
            assert type(x) is np.ndarray and x.dtype == np.float64, (label, f)
            # times relative to the step (exposed communication can be ~0)
            is_time = f.endswith("_s") and not f.endswith("_per_s")  # not throughput
            scale = np.asarray(out_jx.iteration_s) if is_time else np.abs(y)
            assert np.all(np.abs(x - y) <= 1e-9 * scale), (label, f, np.max(np.abs(x - y) / scale))


@pytest.mark.parametrize("n_regimes", [1, 3])  # 1: the affine sweep, 3: per bucket cap
def test_a_batch_of_parameter_sets_equals_one_set_at_a_time(n_regimes):
    fitted, _ = _fitted(n_regimes, seed=1)
    w = get_workload("resnet50")
    rng = np.random.default_rng(2)
    thetas = fitted.flat() + rng.normal(0, 0.05, (4, fitted.flat().size))
    batch = fitted.from_flat(thetas)
    for arch in ("ps", "ring", "fsdp", "hierarchical"):
        kw = _grid(arch)
        workers = kw.pop("workers")
        together = iteration_time(batch, w, arch, workers, **kw).iteration_s
        assert together.shape == (4, workers.size)
        for d in range(4):
            alone = iteration_time(fitted.from_flat(thetas[d]), w, arch, workers, **kw)
            np.testing.assert_allclose(together[d], alone.iteration_s, rtol=1e-12)


def test_draws_in_numpy_equal_jax_vmapped_draws():
    fitted, _ = _fitted(3, seed=3)
    w = get_workload("resnet50")
    rows = [(Variant("ring"), 16, 1, 25 * 2**20, 32, 32), (Variant("ps"), 8, 2, 2**20, 32, 32)]
    spec, _ = TimeSpec.build(w, 1, rows)
    rng = np.random.default_rng(4)
    thetas = fitted.flat() + rng.normal(0, 0.05, (3, fitted.flat().size))
    numpy_out = spec_times_draws(fitted.from_flat(thetas), spec)
    for d in range(3):
        jax_params = jax.tree_util.tree_map(jnp.asarray, fitted.from_flat(thetas[d]))
        one = np.asarray(jax.jit(lambda p: spec_times(p, spec))(jax_params))
        np.testing.assert_allclose(numpy_out[d], one, rtol=1e-9)


def test_batched_interval_equals_the_jvp_interval():
    # Profile.interval(batched=True): central differences over one numpy call;
    # the jax path: jax.jvp of the same function. Equal where the model is smooth
    # (a configuration away from the hard max's kinks), to the differences' error.
    prof = Profile.from_preset("ethernet-10g", "v100", n_regimes=3)
    w = get_workload("resnet50")
    n = np.array([2.0, 8.0, 32.0])

    def fn(p):
        return iteration_time(p, w, "p2p", n, bucket_bytes=4 * 2**20).iteration_s

    lo_b, hi_b = prof.interval(fn, batched=True)
    lo_j, hi_j = prof.interval(lambda p: jnp.asarray(fn(p)))
    assert isinstance(lo_b, np.ndarray) and lo_b.shape == (3,)
    np.testing.assert_allclose(lo_b, np.asarray(lo_j), rtol=1e-6)
    np.testing.assert_allclose(hi_b, np.asarray(hi_j), rtol=1e-6)
    assert np.all(lo_b < fn(prof.params)) and np.all(fn(prof.params) < hi_b)


def test_fluid_model_numpy_equals_jax_and_several_sizes_broadcast():
    fitted, _ = _fitted(3, seed=5)
    w = get_workload("resnet50")
    us = np.log(np.array([2.0**18, 2.0**22, 2.0**26]))
    kw = dict(num_slots=int(np.ceil(w.total_param_bytes / 2.0**18)) + 1, ranks_per_node=1.0)
    together = fluid_iteration_time(fitted, w, "ring", 8.0, us, **kw).iteration_s
    assert together.shape == (3,)
    jax_params = jax.tree_util.tree_map(jnp.asarray, fitted)
    for i, u in enumerate(us):
        t = jax.jit(lambda p, u: fluid_iteration_time(p, w, "ring", 8.0, u, **kw).iteration_s)(
            jax_params, jnp.asarray(u)
        )
        assert together[i] == pytest.approx(float(t), rel=1e-9)


@pytest.mark.parametrize("arch", ["ring", "ps", "zero1", "p2p"])
def test_bucket_schedule_in_numpy_ends_where_iteration_time_does(arch):
    fitted, _ = _fitted(3, seed=6)
    w = get_workload("resnet50")
    s = bucket_schedule(fitted, w, arch, 16, servers=4, bucket_bytes=8 * 2**20)
    t = float(iteration_time(fitted, w, arch, 16, servers=4, bucket_bytes=8 * 2**20).iteration_s)
    assert s.iteration_s == pytest.approx(t, rel=1e-12)
    assert s.overhead_start_s + s.overhead_s == pytest.approx(t, rel=1e-9)
    assert np.all(np.diff(s.end_s) >= 0) and np.all(s.start_s >= s.ready_s - 1e-15)


@pytest.mark.parametrize("case", range(40))
def test_unique_rows_equals_numpy_unique(case):
    # _unique_rows ranks whole-number columns densely and anything else by
    # lexsort; both must return exactly what np.unique(axis=0) returns
    from costmodel._timeline import _unique_rows

    rng = np.random.default_rng(case)
    size = int(rng.integers(1, 3000))
    if case % 3 == 0:  # non-integer values: the lexsort path
        cols = [rng.choice([0.5, 1.0, 2.25, 7.0], size) for _ in range(3)]
    elif case % 3 == 1:  # small whole numbers: the dense table
        cols = [rng.integers(1, 9, size).astype(float) for _ in range(3)]
        if case % 2:  # a constant column (the dense key skips it)
            cols[1] = np.full(size, 8.0)
    else:  # a wide range of whole numbers: too big for the table, lexsort
        cols = [rng.integers(0, 1 << 20, size).astype(float) for _ in range(3)]
    uniq, inverse = _unique_rows(*cols)
    want, want_inverse = np.unique(np.stack(cols, 1), axis=0, return_inverse=True)
    np.testing.assert_array_equal(uniq, want)
    np.testing.assert_array_equal(inverse, np.asarray(want_inverse).ravel())
    np.testing.assert_array_equal(uniq[inverse], np.stack(cols, 1))


@pytest.mark.parametrize("arch", ["ps", "ps_host", "hybrid", "p2p", "ring", "tree", "hierarchical"])
def test_affine_sweep_equals_the_core_cap_by_cap(arch):
    # One regime: _affine_sweep evaluates the step's parts per distinct row and the
    # end of communication as one matrix product per cap. _core, cap by cap on the
    # padded exact buckets (the jitted path's layout), must give the same numbers:
    # random workers, ranks per node, servers, caps (0 and 1 GiB included), a
    # fixed global batch (non-integer per-worker batches), 2-step accumulation and
    # a batch of 3 parameter sets.
    from costmodel import accumulated_workload, bucket_table
    from costmodel._buckets import WorkloadTerms
    from costmodel._timeline import _core, _resolve_arch, costs_are_affine

    rng = np.random.default_rng(7)
    N = 400
    p = preset("ib-hdr-200g", "a100")
    thetas = p.flat() + rng.normal(0, 0.2, (3, p.flat().size))
    params = p.from_flat(thetas).to_numpy()
    assert costs_are_affine(params)
    for w in (get_workload("resnet50"), accumulated_workload(get_workload("bert_base"), 2)):
        g = rng.choice([1.0, 2.0, 8.0], N)
        n = g * rng.integers(1, 33, N)
        k = rng.integers(1, 9, N).astype(float)
        caps = rng.choice([0.0, 2.0**20, 5e6, 25 * 2.0**20, 2.0**30], N)
        batch = 1024.0 / n
        got = iteration_time(
            params, w, arch, n, ranks_per_node=g, servers=k, bucket_bytes=caps,
            batch_size=batch, base_batch_size=1024.0,
        )  # fmt: skip
        a, wt = _resolve_arch(arch, False), WorkloadTerms.from_workload(w, numpy=True)
        table = bucket_table(w, caps)
        sizes = table.sizes
        cnt = np.cumsum((sizes > 0)[:, ::-1], axis=1)[:, ::-1].astype(float)
        byt = np.cumsum(sizes[:, ::-1], axis=1)[:, ::-1]
        for u in np.unique(table.index(caps)):
            rows = np.flatnonzero(table.index(caps) == u)
            col = lambda x, u=u: x[u][:, None, None]  # noqa: E731 - (K, 1, 1) vs (3, rows)
            want = _core(
                params, a, wt, col(sizes), col((sizes > 0).astype(float)), col(table.ready_frac),
                n[rows], g[rows], k[rows], batch[rows], np.full(rows.size, 1024.0), False,
                (col(cnt), col(byt)),
            )  # fmt: skip
            for f in Breakdown.FIELDS:
                x, y = getattr(got, f)[:, rows], np.broadcast_to(getattr(want, f), (3, rows.size))
                np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-15, err_msg=f"{arch} {f}")


@pytest.mark.parametrize("axis", [0, -1])
def test_soft_min_is_the_closed_form_along_either_axis(axis):
    """(Σ xᵣ^(−k))^(−1/k), computed here directly, along a leading or trailing
    regime axis, with one sharpness per row; a single regime is returned exactly."""
    from costmodel._smooth import soft_min

    rng = np.random.default_rng(3)
    x = np.exp(rng.normal(-6.0, 3.0, (3, 500)))  # seconds over six decades
    k = np.exp(rng.normal(1.0, 0.7, 500))
    want = np.sum(x ** (-k), axis=0) ** (-1.0 / k)
    got = soft_min(x if axis == 0 else x.T, k, axis=axis)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.array_equal(soft_min(x[:1], k, axis=0), x[0])
    # the floor keeps a zero time's gradient finite (a level a collective does not use)
    g = jax.grad(lambda v: soft_min(v, 4.0, axis=0))(jnp.asarray([0.0, 2e-3, 1.0]))
    assert np.all(np.isfinite(np.asarray(g)))


def test_core_share_of_many_rank_counts_equals_its_formula_per_count():
    """The numpy path's table of whole rank counts (and its one-count shortcut)
    gives what the formula gives on each count alone; fractional counts and
    parameter draws take the formula itself."""
    from costmodel._params import _core_share, numpy_params

    p = preset("ethernet-10g", "v100").to_numpy()
    p = eqx.tree_at(lambda q: q.log_node_slots, p, np.asarray(np.log(3.0)))
    rng = np.random.default_rng(1)
    for g in (
        rng.integers(1, 65, 1000).astype(float),  # the table
        np.full(1000, 8.0),  # one count
        rng.uniform(1.0, 9.0, 1000),  # fractional: the formula
        rng.integers(1, 9, (4, 250)).astype(float),  # 2-D
        rng.integers(4000, 5000, 1000).astype(float),  # past the sweep's table
    ):
        want = np.array(
            [float(_core_share(p.node_compute_slots, np.asarray(v))) for v in g.ravel()]
        )
        for q in (p, numpy_params(p)):  # the formula, and the sweep's table of 1…4096
            np.testing.assert_allclose(q.core_share(g).ravel(), want, rtol=1e-14)
            assert q.core_share(g).shape == g.shape
    draws = p.from_flat(p.flat() + rng.normal(0, 0.3, (5, p.flat().size))).to_numpy(batch_ndim=1)
    g = rng.integers(1, 9, 40).astype(float)
    np.testing.assert_allclose(
        draws.core_share(g), _core_share(draws.node_compute_slots, g), rtol=1e-14
    )


def test_numpy_evaluation_reuses_freed_buffers_instead_of_faulting_pages_anew():
    """After :func:`costmodel._xp.keep_freed_memory` (which every numpy evaluation
    calls), allocating and freeing a 1 MiB array again and again faults its pages
    once (glibc's default, a fresh mmap per array: 224–257 faults per 100 here)."""
    import resource

    from costmodel._xp import keep_freed_memory

    if not keep_freed_memory():
        pytest.skip("the C library has no glibc mallopt (not glibc)")
    np.ones(1 << 17).sum()  # the first time may fault
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        np.ones(1 << 17).sum()  # 1 MiB, freed at once
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 20, f"{faults} minor page faults for 100 arrays of 1 MiB"
