"""Gradient dtype and K-step accumulation against their closed forms (issue 15 item 1).

fp16/bf16 gradients halve every bucket's bytes and so the bandwidth term of the
exchange, leaving its latency term; K-step accumulation (DDP ``no_sync``) gives
T_K = (K − 1)(T_fwd + T_bwd) + T_1: one exchange per K micro-batches, overlapped
with the last backward only.
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import (
    accumulate,
    accumulated_iteration_time,
    accumulated_workload,
    bucketize,
    collective_time,
    get_workload,
    grad_dtype_bytes,
    iteration_time,
    preset,
    with_grad_dtype,
)
from tuner import predict_iterations

P = preset("ethernet-10g", "v100")  # one regime: each bucket costs α-terms + β-terms × bytes
W = get_workload("resnet50", 32)


@pytest.mark.parametrize("dtype,nbytes", [("fp32", 4), ("bf16", 2), ("fp16", 2)])
def test_grad_dtype_sets_bytes_per_element(dtype, nbytes):
    w = with_grad_dtype(W, dtype)
    assert grad_dtype_bytes(dtype) == nbytes
    assert w.total_param_bytes == W.total_params * nbytes
    assert np.array_equal(w.param_counts, W.param_counts)  # same tensors, fewer bytes
    with pytest.raises(ValueError, match="fp32, bf16, fp16"):
        with_grad_dtype(W, "int8")


def test_fp16_halves_bucket_bytes_and_only_the_bandwidth_term():
    w16 = with_grad_dtype(W, "fp16")
    cap = 25 * 2**20
    s32, _ = bucketize(W, cap)
    s16, _ = bucketize(w16, cap // 2)
    np.testing.assert_array_equal(s16, s32 / 2)  # the same buckets, half the bytes each
    n = 16
    c32 = iteration_time(P, W, "ring", n, bucket_bytes=cap)
    c16 = iteration_time(P, w16, "ring", n, bucket_bytes=cap // 2)
    m = float(c32.num_buckets)
    assert float(c16.num_buckets) == m
    # ring all_reduce per bucket: 2(n−1)α + [2(n−1)/n β + (n−1)/n γ]·S — affine in S,
    # so comm(G/2) = m·t(0) + (comm(G) − m·t(0))/2.
    t0 = float(collective_time(P, "all_reduce", 0.0, n, 1))
    bw32 = float(c32.communication_s) - m * t0
    bw16 = float(c16.communication_s) - m * t0
    assert bw32 > 10 * m * t0  # the test is about the bandwidth term: it dominates here
    np.testing.assert_allclose(bw16, bw32 / 2, rtol=1e-9)
    # every bucket's time, by the collective's own closed form
    want = sum(float(collective_time(P, "all_reduce", s, n, 1)) for s in s16)
    np.testing.assert_allclose(float(c16.communication_s), want, rtol=1e-9)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_accumulation_closed_form(k):
    n = np.array([1.0, 4.0, 16.0, 64.0])
    b1 = iteration_time(P, W, "ring", n)
    bk = accumulate(b1, P, W, k)
    f, b, t1 = (
        np.asarray(x, dtype=np.float64) for x in (b1.forward_s, b1.backward_s, b1.iteration_s)
    )
    tk = (k - 1) * (f + b) + t1
    np.testing.assert_allclose(bk.iteration_s, tk, rtol=1e-12)
    np.testing.assert_allclose(bk.throughput_samples_per_s, k * n * W.batch_size / tk, rtol=1e-12)
    # one exchange per K micro-batches: the same collectives per optimizer step,
    # so per micro-batch the exchange count (and its time) is divided by K
    np.testing.assert_array_equal(bk.num_buckets, b1.num_buckets)
    np.testing.assert_allclose(bk.communication_s, b1.communication_s, rtol=1e-12)
    # what is not compute is paid once per optimizer step, not once per micro-batch:
    # T_K − K·(f + b) is one iteration's exchange, update and overhead, T_1 − (f + b)
    # (with an exchange per micro-batch it would be K times that)
    np.testing.assert_allclose(
        np.asarray(bk.iteration_s) - k * (f + b), t1 - (f + b), rtol=1e-9, atol=1e-12
    )
    assert np.all(t1 - (f + b) > 0)  # there is something to pay once
    # overlapped with the last backward only: what was exposed stays exposed
    np.testing.assert_allclose(bk.exposed_communication_s, b1.exposed_communication_s, rtol=1e-9)
    # one worker has no communication: still perfectly efficient
    np.testing.assert_allclose(np.asarray(bk.scaling_efficiency)[0], 1.0, rtol=1e-9)
    # efficiency by its definition: throughput / (n × one worker's throughput with K steps)
    one = accumulate(iteration_time(P, W, "ring", 1), P, W, k)
    base = float(one.throughput_samples_per_s)
    np.testing.assert_allclose(
        bk.scaling_efficiency, np.asarray(bk.throughput_samples_per_s) / (n * base), rtol=1e-9
    )


def test_accumulation_overlaps_only_the_last_backward():
    """A configuration whose exposed communication is shorter than K−1 backward passes:
    overlapping with every micro-batch would hide it all; no_sync does not."""
    n, k = 64.0, 4
    b1 = iteration_time(P, W, "ring", n)
    exposed = float(b1.exposed_communication_s)
    assert 0 < exposed < (k - 1) * float(b1.backward_s)
    bk = accumulate(b1, P, W, k)
    assert float(bk.exposed_communication_s) == pytest.approx(exposed, rel=1e-9)
    # and accumulation amortises it: efficiency rises with K
    effs = [float(accumulate(b1, P, W, kk).scaling_efficiency) for kk in (1, 2, 4, 8)]
    assert effs == sorted(effs) and effs[-1] > effs[0]


@pytest.mark.parametrize("arch", ["ring", "tree", "hierarchical", "ps", "p2p", "zero1"])
def test_architectures_that_exchange_once_per_step_follow_the_no_sync_closed_form(arch):
    """The timeline's accumulation (what the tuner and predict run) equals the closed
    form T_K = (K − 1)(f + b) + T_1 for DDP no_sync, Horovod backward_passes_per_step
    and DeepSpeed stage 1 (which reduces only at the accumulation boundary)."""
    n = np.array([2.0, 8.0, 32.0, 128.0])
    for k in (2, 4):
        exact = accumulate(iteration_time(P, W, arch, n, ranks_per_node=4), P, W, k)
        wk = accumulated_workload(W, k)
        assert wk.batch_size == k * W.batch_size and wk.accumulation_steps == k
        got = iteration_time(P, wk, arch, n, ranks_per_node=4)
        for f in ("iteration_s", "throughput_samples_per_s", "scaling_efficiency",
                  "communication_s", "num_buckets", "forward_s"):  # fmt: skip
            np.testing.assert_allclose(getattr(got, f), getattr(exact, f), rtol=1e-9)


def test_fsdp_moves_k_times_the_bytes_under_accumulation():
    """FSDP FULL_SHARD/HYBRID_SHARD gather every unit in every micro-batch's forward and
    backward and reduce-scatter it (issue 24: it was costed as one exchange)."""
    w = get_workload("gpt2", 4)
    n = np.array([8.0, 32.0])
    for arch in ("fsdp", "hsdp"):
        one = iteration_time(P, w, arch, n, ranks_per_node=8)
        for k in (2, 8):
            bk = iteration_time(P, accumulated_workload(w, k), arch, n, ranks_per_node=8)
            np.testing.assert_allclose(bk.communication_s, k * np.asarray(one.communication_s))
            np.testing.assert_allclose(bk.num_buckets, k * np.asarray(one.num_buckets))
            # T_K = K·(f + b + E) + U + O: only the update and overhead are paid once
            per_micro = (np.asarray(one.iteration_s) - np.asarray(one.update_s)
                         - np.asarray(one.overhead_s))  # fmt: skip
            np.testing.assert_allclose(
                bk.iteration_s,
                k * per_micro + np.asarray(one.update_s) + np.asarray(one.overhead_s),
                rtol=1e-9,
            )
            # more than the no_sync closed form by (K − 1) × the exposed part
            assert np.all(
                np.asarray(bk.iteration_s) > np.asarray(accumulate(one, P, w, k).iteration_s)
            )


def test_zero2_reduces_in_every_micro_batch_and_gathers_once():
    """DeepSpeed stage 2: "ZeRO stage >= 2 communicates during non gradient accumulation
    boundaries as well" (engine.allreduce_gradients); the parameter all-gather follows
    the optimizer step, once. Stage 1 reduces only at the boundary."""
    n, k = 16.0, 4
    z1 = iteration_time(P, W, "zero1", n)
    z2 = iteration_time(P, W, "zero2", n)
    from costmodel import bucket_table

    sizes = bucket_table(W, np.array([float(25 * 2**20)])).sizes[0]
    sizes = sizes[sizes > 0]
    c1 = sum(float(collective_time(P, "all_reduce", s, n, 1)) for s in sizes)
    c2 = sum(float(collective_time(P, "all_gather", s, n, 1)) for s in sizes)
    assert float(z2.communication_s) == pytest.approx(c1 + c2, rel=1e-9)
    bk1 = iteration_time(P, accumulated_workload(W, k), "zero1", n)
    bk2 = iteration_time(P, accumulated_workload(W, k), "zero2", n)
    assert float(bk1.communication_s) == pytest.approx(float(z1.communication_s), rel=1e-9)
    assert float(bk2.communication_s) == pytest.approx(k * c1 + c2, rel=1e-9)
    assert float(bk2.iteration_s) > float(bk1.iteration_s)


def test_wrapper_and_predict_iterations_agree_with_the_pieces():
    k = 4
    w16 = with_grad_dtype(W, "bf16")
    want = accumulate(iteration_time(P, w16, "ring", 8.0), P, w16, k)
    got = accumulated_iteration_time(P, W, "ring", 8.0, accumulation_steps=k, grad_dtype="bf16")
    assert float(got.iteration_s) == pytest.approx(float(want.iteration_s), rel=1e-12)
    rows = predict_iterations(P, W, ["ring"], [8], grad_dtype="bf16", accumulation_steps=k)
    assert rows[0]["iteration_s"] == pytest.approx(float(want.iteration_s), rel=1e-9)
    assert rows[0]["gradient_bytes"] == W.total_params * 2
    assert rows[0]["accumulation_steps"] == k and rows[0]["warnings"] == []
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="accumulation_steps"):
            predict_iterations(P, W, ["ring"], [8], accumulation_steps=bad)
