"""Framework settings of a configuration: the frameworks' documented names and units.

The tables below list option names as each framework documents them (source per
table); a setting the tuner prints must be one of them, with the unit the
framework reads.
"""

from __future__ import annotations

import ast
import json
import math
import re

import numpy as np
import pytest

from costmodel import get_workload, memory_per_rank
from tuner import format_framework_settings, framework_settings
from tuner._settings import DDP_FIRST_BUCKET_BYTES

# torch/nn/parallel/distributed.py, DistributedDataParallel.__init__ (PyTorch 2.x signature).
DDP_KWARGS = {
    "module",
    "device_ids",
    "output_device",
    "dim",
    "broadcast_buffers",
    "init_sync",
    "process_group",
    "bucket_cap_mb",
    "find_unused_parameters",
    "check_reduction",
    "gradient_as_bucket_view",
    "static_graph",
    "delay_all_reduce_named_params",
    "param_to_hook_all_reduce",
    "mixed_precision",
    "device_mesh",
}
# torch/csrc/distributed/c10d/reducer.hpp: kDefaultFirstBucketBytes = int(1024 * 1024).
DDP_FIRST_BUCKET = 1024 * 1024

# horovod/runner/common/util/config_parser.py "Parameter knobs" and docs/tensor-fusion.rst;
# NCCL_ALGO from the NCCL user guide, "Environment Variables".
HOROVOD_ENV = {
    "HOROVOD_FUSION_THRESHOLD",
    "HOROVOD_CYCLE_TIME",
    "HOROVOD_CACHE_CAPACITY",
    "HOROVOD_HIERARCHICAL_ALLREDUCE",
    "HOROVOD_HIERARCHICAL_ALLGATHER",
}
HOROVODRUN_FLAGS = {"--fusion-threshold-mb", "--cycle-time-ms", "--hierarchical-allreduce"}
NCCL_ALGO_VALUES = {"Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"}

# hvd.DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
# backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0,
# groups=None, sparse_as_dense=False, process_set=global_process_set)
# (horovod/torch/optimizer.py, Horovod 2626dc8)
HOROVOD_OPTIMIZER_KWARGS = {
    "named_parameters",
    "compression",
    "backward_passes_per_step",
    "op",
    "gradient_predivide_factor",
    "num_groups",
    "groups",
    "sparse_as_dense",
    "process_set",
}
# torch/distributed/fsdp/api.py MixedPrecision dataclass (torch 2.11.0)
MIXED_PRECISION_FIELDS = {
    "param_dtype",
    "reduce_dtype",
    "buffer_dtype",
    "keep_low_precision_grads",
    "cast_forward_inputs",
    "cast_root_forward_inputs",
}
# DeepSpeed docs/_pages/config-json.md top-level keys (batch size, precision, ZeRO);
# deepspeed/runtime/constants.py: communication_data_type in fp16, bf16, fp32.
DEEPSPEED_TOP_KEYS = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "bf16",
    "fp16",
    "communication_data_type",
    "zero_optimization",
}
# DeepSpeed docs/_pages/config-json.md "ZeRO Optimizations" and the ZeRO-3 / MiCS docs.
DEEPSPEED_ZERO_KEYS = {
    "stage",
    "allgather_partitions",
    "allgather_bucket_size",
    "overlap_comm",
    "reduce_scatter",
    "reduce_bucket_size",
    "contiguous_gradients",
    "round_robin_gradients",
    "offload_param",
    "offload_optimizer",
    "sub_group_size",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_gather_16bit_weights_on_model_save",
    "mics_shard_size",
    "mics_hierarchical_params_gather",
}

# torch/distributed/fsdp/fully_sharded_data_parallel.py FullyShardedDataParallel.__init__
# and torch/distributed/fsdp/api.py ShardingStrategy / BackwardPrefetch.
FSDP_KWARGS = {
    "module",
    "process_group",
    "sharding_strategy",
    "cpu_offload",
    "auto_wrap_policy",
    "backward_prefetch",
    "mixed_precision",
    "ignored_modules",
    "param_init_fn",
    "device_id",
    "sync_module_states",
    "forward_prefetch",
    "limit_all_gathers",
    "use_orig_params",
    "ignored_states",
    "device_mesh",
}
FSDP_ENUMS = {
    "ShardingStrategy": {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"},
    "BackwardPrefetch": {"BACKWARD_PRE", "BACKWARD_POST"},
}

# tensorflow/benchmarks scripts/tf_cnn_benchmarks/benchmark_cnn.py flags; TensorFlow API names.
TF_CNN_FLAGS = {
    "variable_update": {
        "parameter_server",
        "replicated",
        "distributed_replicated",
        "independent",
        "distributed_all_reduce",
        "collective_all_reduce",
        "horovod",
    },
    "local_parameter_device": {"cpu", "gpu", "CPU", "GPU"},
    "device": {"cpu", "gpu", "CPU", "GPU"},
    "data_format": {"NHWC", "NCHW"},
    "cross_replica_sync": {"True", "False"},
    "ps_hosts": None,
    "worker_hosts": None,
    "num_gpus": None,
}
TF_NAMES = {
    "tf.distribute.experimental.ParameterServerStrategy",
    "tf.distribute.experimental.partitioners.FixedShardsPartitioner",
    "tf.distribute.cluster_resolver.TFConfigClusterResolver",
}

MIB = 2**20


def _cfg(arch, bucket=34 * MIB, workers=16, g=8, **kw):
    return {
        "architecture": arch,
        "workers": workers,
        "ranks_per_node": g,
        "bucket_bytes": bucket,
        **kw,
    }


# Which framework runs each architecture, typed from the frameworks' docs: DDP and
# Horovod all-reduce (ring/tree/NCCL's hierarchical), TensorFlow's parameter servers,
# DeepSpeed ZeRO stages 1-2 (ZeRO-1 ≈ DDP + a sharded optimizer; ZeRO-2 only DeepSpeed:
# FSDP's SHARD_GRAD_OP gathers parameters in every forward, another schedule), FSDP
# FULL_SHARD / HYBRID_SHARD ≈ ZeRO-3.
EXPECTED_FRAMEWORKS = {
    "ring": ("pytorch_ddp", "horovod"),
    "tree": ("pytorch_ddp", "horovod"),
    "hierarchical": ("pytorch_ddp", "horovod"),
    "ps": ("tensorflow",),
    "ps_host": ("tensorflow",),
    "hybrid": ("tensorflow",),
    "p2p": ("tensorflow",),
    "zero1": ("deepspeed", "pytorch_ddp"),
    "zero2": ("deepspeed",),
    "fsdp": ("pytorch_fsdp", "deepspeed"),
    "hsdp": ("pytorch_fsdp", "deepspeed"),
}


def test_every_architecture_maps_to_its_frameworks():
    from costmodel import ARCHITECTURE_NAMES

    assert set(EXPECTED_FRAMEWORKS) == set(ARCHITECTURE_NAMES)  # every architecture has one
    for arch, frameworks in EXPECTED_FRAMEWORKS.items():
        s = framework_settings(_cfg(arch, servers=2))
        assert tuple(s) == frameworks, arch
        for entry in s.values():
            assert entry["docs"] and entry["snippet"] and isinstance(entry["notes"], list)


@pytest.mark.parametrize("bucket", [0, 1, 1000, MIB, 25 * MIB, 34 * MIB + 12345, 2**30 - 1])
def test_ddp_bucket_cap_mb_is_mib_and_gives_back_the_bytes(bucket):
    ddp = framework_settings(_cfg("ring", bucket))["pytorch_ddp"]
    cap = ddp["kwargs"]["bucket_cap_mb"]
    # DDP: self.bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)
    assert int(cap * 1024 * 1024) == bucket
    # an explicit bucket_cap_mb sizes the first bucket too since PyTorch 2.4
    # (DistributedDataParallel.__init__: bucket_bytes_cap_default False); 1 MiB before
    assert ddp["first_bucket_bytes"] == int(cap * 1024 * 1024)
    assert ddp["first_bucket_bytes_before_torch_2_4"] == DDP_FIRST_BUCKET == DDP_FIRST_BUCKET_BYTES
    assert set(ddp["kwargs"]) <= DDP_KWARGS


def test_ddp_snippet_is_python_with_documented_keywords_only():
    for arch in ("ring", "tree", "hierarchical", "zero1"):
        ddp = framework_settings(_cfg(arch))["pytorch_ddp"]
        snippet = ddp["snippet"]
        # the first bucket is said once, in the notes (the snippet repeated it in short)
        assert "first bucket" not in snippet
        assert sum("first bucket" in n for n in ddp["notes"]) == 1, ddp["notes"]
        code = "\n".join(
            line for line in snippet.splitlines() if not line.startswith(("#", "export"))
        )
        tree = ast.parse(code)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        ddp = next(n for n in calls if getattr(n.func, "id", None) == "DistributedDataParallel")
        assert {k.arg for k in ddp.keywords} <= DDP_KWARGS
        values = {k.arg: ast.literal_eval(k.value) for k in ddp.keywords if k.arg != "device_ids"}
        assert values["bucket_cap_mb"] == 34.0 and values["gradient_as_bucket_view"] is True


@pytest.mark.parametrize("arch", ["ring", "tree", "hierarchical"])
def test_horovod_names_and_units(arch):
    hvd = framework_settings(_cfg(arch, 48 * MIB + 7))["horovod"]
    env = hvd["env"]
    assert set(env) - {"NCCL_ALGO"} <= HOROVOD_ENV
    assert env["HOROVOD_FUSION_THRESHOLD"] == str(48 * MIB + 7)  # bytes
    assert (env.get("HOROVOD_HIERARCHICAL_ALLREDUCE") == "1") == (arch == "hierarchical")
    assert (env.get("NCCL_ALGO") == "Tree") == (arch == "tree")
    assert env.get("NCCL_ALGO", "Tree") in NCCL_ALGO_VALUES
    for flag in hvd["horovodrun_flags"]:
        assert flag.split()[0] in HOROVODRUN_FLAGS
    for k, v in env.items():  # the snippet sets exactly these variables
        assert f"{k}={v}" in hvd["snippet"]
    assert "HOROVOD_CYCLE_TIME" not in env  # no backward time given


def test_horovod_zero_bucket_disables_fusion_and_whole_mib_gives_the_flag():
    hvd = framework_settings(_cfg("ring", 0))["horovod"]
    assert hvd["env"]["HOROVOD_FUSION_THRESHOLD"] == "0"
    assert framework_settings(_cfg("ring", 64 * MIB))["horovod"]["horovodrun_flags"] == [
        "--fusion-threshold-mb 64"
    ]


def test_horovod_cycle_time_when_backward_fills_a_bucket_slower_than_the_default_cycle():
    w = get_workload("resnet50", 64)  # 102.2 MB of fp32 gradients
    g_bytes = w.total_param_bytes
    for backward_s, bucket in ((0.2, 32 * MIB), (0.2, 256 * 1024), (0.05, 8 * MIB)):
        cfg = _cfg("ring", bucket, breakdown={"backward_s": backward_s})
        hvd = framework_settings(cfg, w)["horovod"]
        fill_ms = 1e3 * backward_s * bucket / g_bytes  # closed form
        if fill_ms > 1.0:  # Horovod's default cycle, 1 ms since v0.21.0
            # never longer than 10 ms: a ready tensor waits up to one cycle (issue 24:
            # Qwen2-0.5B's snippet set 1,690 ms)
            want = min(fill_ms, 10.0)
            assert float(hvd["env"]["HOROVOD_CYCLE_TIME"]) == pytest.approx(want, rel=5e-3)
            assert hvd["cycle_time_ms"] == pytest.approx(want, rel=5e-3)
        else:
            assert "HOROVOD_CYCLE_TIME" not in hvd["env"] and hvd["cycle_time_ms"] is None
    # a bucket larger than the model fills when backward ends (200 ms): the cycle stays at
    # 10 ms and the note says how much one fused message then holds (10/200 of 102 MB)
    hvd = framework_settings(_cfg("ring", 2**30, backward_s=0.2), w)["horovod"]
    assert hvd["cycle_time_ms"] == 10.0
    assert any("about 4.87 MiB" in n for n in hvd["notes"]), hvd["notes"]
    # and reads as the consequence it is, with the cycle that would fill the buckets
    # (a new user read "less than the threshold the prediction assumed" as a contradiction)
    note = next(n for n in hvd["notes"] if "about 4.87 MiB" in n)
    assert "not the 1 GiB buckets predicted" in note and "--cycle-time-ms 200 " in note, note


@pytest.mark.parametrize(
    ("arch", "servers", "colocated", "ps", "placed", "mode", "device"),
    [
        ("ps", 4, False, 4, False, "parameter_server", "gpu"),
        ("ps", 3, True, 3, True, "parameter_server", "gpu"),
        ("p2p", 0, False, 16, True, "parameter_server", "gpu"),  # every worker serves 1/n
        ("ps_host", 0, False, 2, True, "parameter_server", "cpu"),  # one shard per node
        ("hybrid", 2, False, 2, True, "distributed_replicated", "gpu"),
    ],
)
def test_parameter_servers_count_and_placement(arch, servers, colocated, ps, placed, mode, device):
    tf = framework_settings(_cfg(arch, servers=servers, colocated=colocated))["tensorflow"]
    assert tf["ps_tasks"] == ps and tf["ps_colocated"] is placed
    assert tf["cluster"] == {"worker": 16, "ps": ps}
    assert f"num_shards={ps}" in tf["variable_partitioner"]
    flags = dict(f.removeprefix("--").split("=", 1) for f in tf["tf_cnn_benchmarks_flags"])
    assert set(flags) <= set(TF_CNN_FLAGS)
    for k, v in flags.items():
        assert TF_CNN_FLAGS[k] is None or v in TF_CNN_FLAGS[k]
    assert flags["variable_update"] == mode and flags["local_parameter_device"] == device
    for name in re.findall(
        r"tf\.[\w.]+", " ".join((tf["snippet"], tf["strategy"], tf["variable_partitioner"]))
    ):
        assert name in TF_NAMES


@pytest.mark.parametrize(("arch", "stage"), [("zero1", 1), ("zero2", 2), ("fsdp", 3), ("hsdp", 3)])
@pytest.mark.parametrize("dtype_bytes", [2, 4])
def test_deepspeed_stage_and_bucket_elements(arch, stage, dtype_bytes):
    bucket = 40 * MIB + 3
    ds = framework_settings(_cfg(arch, bucket), dtype_bytes=dtype_bytes)["deepspeed"]
    assert set(ds["config"]) <= DEEPSPEED_TOP_KEYS
    zero = ds["config"]["zero_optimization"]
    assert set(zero) <= DEEPSPEED_ZERO_KEYS
    assert zero["stage"] == stage
    if stage < 3:
        assert zero["reduce_bucket_size"] == bucket // dtype_bytes  # elements, not bytes
        assert zero["allgather_bucket_size"] == bucket // dtype_bytes
    else:  # one FSDP unit per block: the cap is not a setting of this prediction
        assert "reduce_bucket_size" not in zero
    assert zero["overlap_comm"] is True
    assert (zero.get("mics_shard_size") == 8) == (arch == "hsdp")
    assert json.loads(ds["snippet"]) == ds["config"]  # the snippet is ds_config.json


def test_deepspeed_elements_follow_the_workload_dtype_and_stop_at_the_model():
    w = get_workload("gpt2", 8, dtype_bytes=2)
    ds = framework_settings(_cfg("zero2", 64 * MIB), w)["deepspeed"]
    assert ds["config"]["zero_optimization"]["reduce_bucket_size"] == 32 * MIB
    # a cap above the model: DeepSpeed allocates its buckets at reduce_bucket_size, so the
    # emitted size is the model's gradient elements, as the memory check counts
    big = framework_settings(_cfg("zero2", 2**30), w)["deepspeed"]["config"]
    assert big["zero_optimization"]["reduce_bucket_size"] == w.total_param_bytes // 2
    # fsdp with wrap="bucket" (size-based units) keeps the cap as the bucket
    zero3 = framework_settings(_cfg("fsdp", 64 * MIB, wrap="bucket"), w)["deepspeed"]
    assert zero3["config"]["zero_optimization"]["reduce_bucket_size"] == 32 * MIB


def test_zero_stages_count_deepspeeds_two_staging_buckets():
    # stage_1_and_2.py: contiguous_gradients + overlap_comm (as emitted) allocate two
    # ipg_buffer of reduce_bucket_size elements
    w = get_workload("gpt2", 8, dtype_bytes=2)
    for arch in ("zero1", "zero2"):
        m = memory_per_rank(w, arch, 8, bucket_bytes=64 * MIB, activation_bytes=0)
        assert float(m.buffer_bytes) == 2 * 64 * MIB
        big = memory_per_rank(w, arch, 8, bucket_bytes=2**30, activation_bytes=0)
        assert float(big.buffer_bytes) == 2 * w.total_param_bytes  # at most the model
    # DDP's buckets are views into the gradients; Horovod's fusion buffer is named instead
    assert float(memory_per_rank(w, "ring", 8, bucket_bytes=64 * MIB).buffer_bytes) == 0
    hvd = framework_settings(_cfg("ring", 64 * MIB), w)["horovod"]
    assert hvd["fusion_buffer_bytes"] == 64 * MIB
    assert any("fusion buffer" in n and "64 MiB" in n for n in hvd["notes"])


@pytest.mark.parametrize(("arch", "strategy"), [("fsdp", "FULL_SHARD"), ("hsdp", "HYBRID_SHARD")])
def test_fsdp_names(arch, strategy):
    fsdp = framework_settings(_cfg(arch, workers=32, g=8))["pytorch_fsdp"]
    kw = fsdp["kwargs"]
    assert set(kw) <= FSDP_KWARGS
    assert kw["sharding_strategy"] == f"ShardingStrategy.{strategy}"
    assert kw["backward_prefetch"] == "BackwardPrefetch.BACKWARD_PRE"
    for enum, members in FSDP_ENUMS.items():
        for member in re.findall(rf"{enum}\.(\w+)", fsdp["snippet"]):
            assert member in members
    assert set(re.findall(r"^\s+(\w+)=", fsdp["snippet"], re.M)) <= FSDP_KWARGS
    if arch == "hsdp":  # replicas across the 4 nodes, shards within each node's 8 ranks
        assert kw["device_mesh"] == 'init_device_mesh("cuda", (4, 8))'
    assert "mixed_precision" not in kw  # fp32 on the wire: no MixedPrecision


def _keywords(snippet: str, func: str) -> dict:
    """The keyword arguments (as source text) of the call to ``func`` in a Python snippet."""
    code = "\n".join(
        line for line in snippet.splitlines() if not line.startswith(("#", "export", "HOROVOD_"))
    )
    calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)]
    call = next(n for n in calls if ast.unparse(n.func).split(".")[-1] == func)
    return {k.arg: ast.unparse(k.value) for k in call.keywords}


def test_precision_and_accumulation_reach_every_framework():
    """bf16 on the wire of an fp32 model, 8 micro-batches of 4: each framework's own
    switches (names from its source: DDP no_sync, hvd.DistributedOptimizer's
    compression/backward_passes_per_step, FSDP MixedPrecision, DeepSpeed bf16 /
    communication_data_type / gradient_accumulation_steps)."""
    from costmodel import accumulated_workload, with_grad_dtype

    base = get_workload("gpt2", 4)  # fp32 parameters
    w = accumulated_workload(with_grad_dtype(base, "bf16"), 8)
    cfg = {**_cfg("ring", 32 * MIB), "batch_size": 32.0}
    s = framework_settings(cfg, w, param_dtype_bytes=4, grad_dtype="bf16")
    ddp = s["pytorch_ddp"]["snippet"]
    assert "model.no_sync() if i < 7" in ddp and "bf16_compress_hook" in ddp
    ast.parse("\n".join(x for x in ddp.splitlines() if not x.startswith("#")))
    hvd = _keywords(s["horovod"]["snippet"], "DistributedOptimizer")
    assert set(hvd) <= HOROVOD_OPTIMIZER_KWARGS
    assert hvd["compression"] == "hvd.Compression.fp16"  # Horovod has no bf16 compressor
    assert hvd["backward_passes_per_step"] == "8"
    assert any("no bf16 compressor" in n for n in s["horovod"]["notes"])

    s = framework_settings({**cfg, "architecture": "fsdp"}, w, grad_dtype="bf16")
    fsdp = s["pytorch_fsdp"]
    mp = _keywords(fsdp["kwargs"]["mixed_precision"], "MixedPrecision")
    assert set(mp) <= MIXED_PRECISION_FIELDS
    assert mp == dict.fromkeys(("param_dtype", "reduce_dtype", "buffer_dtype"), "torch.bfloat16")
    assert "no_sync()" not in fsdp["snippet"].split("#")[0]  # every micro-batch reduces
    assert "for micro_batch in micro_batches:  # 8 per optimizer step" in fsdp["snippet"]
    ds = s["deepspeed"]["config"]
    assert set(ds) <= DEEPSPEED_TOP_KEYS
    assert ds["bf16"] == {"enabled": True} and ds["communication_data_type"] == "bf16"
    assert ds["gradient_accumulation_steps"] == 8
    assert ds["train_micro_batch_size_per_gpu"] == 4  # 32 per step / 8 micro-batches
    assert "fp16" not in ds  # DeepSpeed refuses both enabled

    # one micro-batch, fp32: none of the switches
    s = framework_settings(_cfg("ring"), base)
    assert "no_sync" not in s["pytorch_ddp"]["snippet"]
    assert _keywords(s["horovod"]["snippet"], "DistributedOptimizer").keys() == {"named_parameters"}


def test_fsdp_notes_name_the_root_unit_of_a_block_wrapped_decoder():
    w = get_workload("llama2_7b", 1, dtype_bytes=2)
    notes = framework_settings(_cfg("fsdp"), w)["pytorch_fsdp"]["notes"]
    root = (2 * 32000 * 4096 + 4096) * 2  # embed_tokens + lm_head + norm, bf16
    from costmodel import format_bytes

    assert any("root unit" in n and format_bytes(root) in n for n in notes), notes


def test_accepts_a_configuration_object_and_its_dict():
    class Config:  # any object with the plain fields
        architecture, workers, ranks_per_node, bucket_bytes = "ring", 8, 1, 25 * MIB
        servers, colocated = 0, False

    a = framework_settings(Config())
    b = framework_settings(
        {"architecture": "ring", "workers": 8, "ranks_per_node": 1, "bucket_bytes": 25 * MIB}
    )
    assert a == b
    assert a["pytorch_ddp"]["launch"] == "torchrun --nnodes=8 --nproc-per-node=1 train.py"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"architecture": "allreduce"}, "architecture"),
        ({"workers": 0}, "workers"),
        ({"bucket_bytes": -1}, "bucket_bytes"),
        ({"bucket_bytes": 1.5}, "bucket_bytes"),
        ({"ranks_per_node": 0}, "ranks_per_node"),
        ({"servers": -2}, "servers"),
    ],
)
def test_bad_fields_are_named(edit, field):
    with pytest.raises(ValueError, match=field):
        framework_settings({**_cfg("ring"), **edit})


def test_format_has_one_titled_block_per_framework():
    s = framework_settings(_cfg("fsdp"))
    text = format_framework_settings(s)
    blocks = text.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [
        "# PyTorch FSDP",
        "# DeepSpeed ZeRO (ds_config.json)",
    ]
    for block, entry in zip(blocks, s.values(), strict=True):
        assert entry["snippet"] in block and all(n in block for n in entry["notes"])


def test_mib_values_are_exact_for_the_default_grid():
    from tuner import DEFAULT_BUCKET_GRID

    caps = np.array(
        [
            framework_settings(_cfg("ring", int(b)))["pytorch_ddp"]["kwargs"]["bucket_cap_mb"]
            for b in DEFAULT_BUCKET_GRID
        ]
    )
    assert all(int(c * 1024 * 1024) == b for c, b in zip(caps, DEFAULT_BUCKET_GRID, strict=True))
    assert math.isclose(caps[list(DEFAULT_BUCKET_GRID).index(25 * MIB)], 25.0)


def test_reads_the_tuners_configuration_and_its_to_dict():
    from tuner import Configuration

    c = Configuration(
        "hierarchical",
        False,
        0,
        16,
        8,
        32 * MIB,
        64.0,
        0.5,
        (0.4, 0.6),
        2048.0,
        0.9,
        None,
        {"backward_s": 0.3},
    )
    w = get_workload("resnet50", 64)
    a, b = framework_settings(c, w), framework_settings(c.to_dict(), w)
    assert a == b
    assert a["horovod"]["env"]["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
    fill_ms = 1e3 * 0.3 * 32 * MIB / w.total_param_bytes  # backward_s from the breakdown
    assert a["horovod"]["cycle_time_ms"] == pytest.approx(min(fill_ms, 10.0), rel=5e-3)


def test_a_cpu_cluster_gets_tensorflows_cpu_flags():
    """A profile measured on CPU gets tf_cnn_benchmarks' CPU flags (benchmark_cnn.py:
    --device cpu|gpu, --data_format NHWC on CPU, NCHW needs cuDNN), not the GPU defaults."""
    gpu = framework_settings(_cfg("ps", servers=2))["tensorflow"]["tf_cnn_benchmarks_flags"]
    cpu = framework_settings(_cfg("ps", servers=2), device="cpu")["tensorflow"]
    flags = dict(f.removeprefix("--").split("=", 1) for f in cpu["tf_cnn_benchmarks_flags"])
    assert flags["device"] == "cpu" and flags["data_format"] == "NHWC"
    assert flags["local_parameter_device"] == "cpu"
    assert "--local_parameter_device=gpu" in gpu and not any("--device=" in f for f in gpu)
    assert any("CPU cluster" in n for n in cpu["notes"])
    # one task per rank on CPU, each with its one device /cpu:0 (benchmark_cnn.py builds
    # num_gpus devices of --device's kind)
    assert flags["num_gpus"] == "1" and flags["worker_hosts"] == "<16 worker tasks>"
    # DDP on CPU: no device_ids (DDP raises for a CPU module given them), gloo's group
    ddp = framework_settings(_cfg("ring"), device="cpu")["pytorch_ddp"]["snippet"]
    assert "device_ids" not in ddp and 'init_process_group("gloo")' in ddp
    assert "device_ids=[local_rank]" in framework_settings(_cfg("ring"))["pytorch_ddp"]["snippet"]
    with pytest.raises(ValueError, match="device must be 'gpu' or 'cpu'"):
        framework_settings(_cfg("ps", servers=2), device="tpu")
