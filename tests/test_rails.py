"""NIC rails: a node's network cap is (NICs per node) × (one NIC's bandwidth).

Datasheet NIC counts for compute traffic: NVIDIA DGX-1 4x InfiniBand EDR 100 Gb/s;
DGX A100 8x ConnectX-6 HDR 200 Gb/s; DGX H100 8x ConnectX-7 NDR 400 Gb/s.
Closed form checked: in a hierarchical all_reduce over m nodes × g ranks, g rings
of S/g bytes cross the network at once, so the inter-node phase moves
2(m−1)/m·S through each node's NICs; with everything else made negligible its
bus bandwidth 2(m−1)/m·S / t saturates at min(g, nics)·B (the p = 8 smooth max of
the per-rank link term S/g·β and the node term S·β/nics, costmodel/_smooth.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import DEFAULT_NICS_PER_NODE, collective_time, preset

DATASHEET = {  # intra-node preset (names the system) -> (network, NICs, bytes/s per NIC)
    # line rate × the presets' stated 92% RDMA efficiency
    "nvlink-v100": ("ib-edr-100g", 4, 11.5e9),  # DGX-1: EDR 100 Gb/s
    "nvlink-a100": ("ib-hdr-200g", 8, 23e9),  # DGX A100: HDR 200 Gb/s
    "nvlink-h100": ("ib-ndr-400g", 8, 46e9),  # DGX H100: NDR 400 Gb/s
}
HDR = 23e9  # one HDR NIC, 0.92 × 200 Gb/s, bytes/s


@pytest.mark.parametrize("intra", sorted(DATASHEET))
def test_dgx_presets_carry_their_datasheet_nic_count(intra):
    network, nics, nic_bw = DATASHEET[intra]
    p = preset(f"{network},{intra}", "a100")
    assert 1 / float(p.beta_s_per_byte[1]) == pytest.approx(nic_bw, rel=1e-12)
    assert 1 / float(p.node_beta_s_per_byte[1]) == pytest.approx(nics * nic_bw, rel=1e-12)
    assert float(p.nics_per_node) == pytest.approx(nics, rel=1e-12)


def test_other_nodes_keep_the_default_and_the_override_sets_the_cap():
    assert DEFAULT_NICS_PER_NODE == 4
    for net in ("ethernet-10g,pcie3-x16", "ib-hdr-200g,pcie4-x16"):
        assert float(preset(net, "v100").nics_per_node) == pytest.approx(4, rel=1e-12)
    # CPU processes (shm): the node's ranks share its one NIC
    assert float(preset("ethernet-10g,shm", "cpu").nics_per_node) == pytest.approx(1, rel=1e-12)
    bw = HDR
    for nics in (1, 2, 8, 16):
        p = preset("ib-hdr-200g,nvlink-a100", "a100", nics_per_node=nics)
        assert 1 / float(p.node_beta_s_per_byte[1]) == pytest.approx(nics * bw, rel=1e-12)
        # nothing else changes
        q = preset("ib-hdr-200g,nvlink-a100", "a100")
        np.testing.assert_array_equal(np.asarray(p.log_beta), np.asarray(q.log_beta))
        assert float(p.node_beta_s_per_byte[0]) == float(q.node_beta_s_per_byte[0])


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", True])
def test_bad_nics_per_node_names_the_argument(bad):
    with pytest.raises(ValueError, match="nics_per_node"):
        preset("ib-hdr-200g,nvlink-a100", "a100", nics_per_node=bad)


def _inter_only(p):
    # Intra-node phases, latencies, reduction and call overhead made negligible.
    return p.scaled(
        beta_intra=1e-6, node_beta_intra=1e-6, alpha=1e-6, gamma=1e-6, call_overhead=1e-6
    )


@pytest.mark.parametrize("nics", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("g", [4, 8])
@pytest.mark.parametrize("m", [2, 4])
def test_hierarchical_busbw_saturates_at_min_of_ranks_and_rails(nics, g, m):
    p = _inter_only(preset("ib-hdr-200g,nvlink-a100", "a100", nics_per_node=nics))
    bw = HDR
    s = 2.0**32
    t = float(collective_time(p, "all_reduce", s, m * g, g, algorithm="hierarchical"))
    moved = 2.0 * (m - 1) / m * s  # through each node's NICs
    # Closed form: smooth max (p = 32, NODE_CAP_SHARPNESS) of the rank's link term and
    # the node's NIC term.
    link, node = moved / g / bw, moved / (nics * bw)
    expected = (link**32 + node**32) ** (1 / 32)
    assert t == pytest.approx(expected, rel=1e-3)
    busbw = moved / t
    assert busbw <= min(g, nics) * bw * (1 + 1e-3)
    if max(g, nics) >= 2 * min(g, nics):  # one term dominates: the smooth max is the max
        assert busbw == pytest.approx(min(g, nics) * bw, rel=2e-3)


def test_rails_at_and_below_the_ranks_per_node_of_a_dgx_a100():
    """g = 8 ranks per node, inter-node phase only: L = moved/g/B the rank's link term,
    moved/(nics·B) = (g/nics)·L the node's. 2 → 4 NICs: the node term dominates both
    times, 2.000×; 4 → 8 NICs: at the knee (nics = g) the smooth max (p = 32,
    NODE_CAP_SHARPNESS) gives (1 + 2³²)^(1/32) / 2^(1/32) ≈ 1.957×, not 2×."""
    s, g, m = 2.0**30, 8, 4
    times = {
        nics: float(
            collective_time(
                _inter_only(preset("ib-hdr-200g,nvlink-a100", "a100", nics_per_node=nics)),
                "all_reduce",
                s,
                m * g,
                g,
                algorithm="hierarchical",
            )
        )
        for nics in (2, 4, 8)
    }
    assert times[2] / times[4] == pytest.approx(2.0, rel=2e-3)
    assert times[4] / times[8] == pytest.approx((1 + 2**32) ** (1 / 32) / 2 ** (1 / 32), rel=2e-3)
    assert times[4] / times[8] == pytest.approx(1.957, rel=1e-3)
    # absolute: eight rails, 2(m−1)/m·S at 2^(1/32) × one rank's link time
    link = 2 * (m - 1) / m * s / g / HDR
    assert times[8] == pytest.approx(2 ** (1 / 32) * link, rel=2e-3)


def test_a_flat_ring_uses_one_nic_whatever_the_rails():
    # One ring crosses each node boundary once: the node cap does not bind.
    s = 2.0**30
    t = [
        float(
            collective_time(
                preset("ib-hdr-200g,nvlink-a100", "a100", nics_per_node=k), "all_reduce", s, 32, 8
            )
        )
        for k in (4, 8)
    ]
    # (the p = 32 smooth max of the link term and a node term ≥ 4× smaller: exact)
    assert t[0] == pytest.approx(t[1], rel=1e-5)
