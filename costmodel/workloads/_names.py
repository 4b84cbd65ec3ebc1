"""The zoo's names, in a module of their own (pure Python: ``--help`` reads them without numpy)."""

#: Names accepted by :func:`costmodel.get_workload` (the zoo's builders, in this order).
WORKLOAD_NAMES: tuple[str, ...] = (
    "alexnet",
    "vgg16",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "inception_v3",
    "bert_base",
    "bert_large",
    "gpt2",
    "llama3_1b",
    "llama2_7b",
)
