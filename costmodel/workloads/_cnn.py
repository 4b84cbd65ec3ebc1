"""Image classifiers of the zoo, built from torchvision's published layer shapes.

Tensor names and forward order follow torchvision's ``named_parameters()``;
ImageNet-1k heads (1000 classes), inputs 224×224 (Inception v3: 299×299), one
image = one sample. Parameter totals equal torchvision's ``num_params`` exactly;
torchvision's ``GFLOPS`` (``_ops``) are multiply-accumulates (GMACs), so the
forward FLOPs here are about 2 × those plus the few non-matmul ops (see
``_builder``).

References:
    torchvision model sources and weight metadata (``num_params``, ``_ops``):
    https://github.com/pytorch/vision/tree/main/torchvision/models —
    alexnet.py, vgg.py, resnet.py, inception.py.
"""

from __future__ import annotations

from ._builder import LayerBuilder, batchnorm, conv2d, linear, pool_out

_TV = "torchvision.models.{} (pytorch/vision, torchvision/models/{}.py)"


def alexnet(b: LayerBuilder) -> str:
    """AlexNet, torchvision's one-GPU variant (Krizhevsky 2014, 'One weird trick').

    torchvision: 61,100,840 parameters, 0.714 GMACs at 224×224.
    """
    hw = (224, 224)
    cfg = [  # (cin, cout, kernel, stride, padding, max-pool after)
        (3, 64, 11, 4, 2, True),
        (64, 192, 5, 1, 2, True),
        (192, 384, 3, 1, 1, False),
        (384, 256, 3, 1, 1, False),
        (256, 256, 3, 1, 1, True),
    ]
    idx = 0
    for cin, cout, k, s, p, pool in cfg:
        hw = conv2d(b, f"features.{idx}", cin, cout, k, hw, stride=s, padding=p, bias=True)
        b.post(cout * hw[0] * hw[1])  # ReLU
        idx += 2
        if pool:
            hw = pool_out(hw, 3, 2)
            b.post(9 * cout * hw[0] * hw[1])  # MaxPool2d(3, 2)
            idx += 1
    # AdaptiveAvgPool2d((6, 6)) on a 6×6 map is the identity: 0 FLOPs.
    linear(b, "classifier.1", 256 * 6 * 6, 4096)
    b.post(4096)  # ReLU
    linear(b, "classifier.4", 4096, 4096)
    b.post(4096)
    linear(b, "classifier.6", 4096, 1000)
    return (
        _TV.format("alexnet", "alexnet")
        + "; Krizhevsky, arXiv:1404.5997. Published: 61,100,840 params, 0.714 GMACs (224x224)."
    )


def vgg16(b: LayerBuilder) -> str:
    """VGG-16 (configuration D, Simonyan & Zisserman 2015), no batch norm.

    torchvision: 138,357,544 parameters, 15.47 GMACs at 224×224.
    """
    hw = (224, 224)
    cin, idx = 3, 0
    for v in (
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        "M",
    ):
        if v == "M":
            hw = pool_out(hw, 2, 2)
            b.post(4 * cin * hw[0] * hw[1])  # MaxPool2d(2, 2)
            idx += 1
            continue
        hw = conv2d(b, f"features.{idx}", cin, v, 3, hw, padding=1, bias=True)
        b.post(v * hw[0] * hw[1])  # ReLU
        cin, idx = v, idx + 2
    # AdaptiveAvgPool2d((7, 7)) on a 7×7 map is the identity.
    linear(b, "classifier.0", 512 * 7 * 7, 4096)
    b.post(4096)
    linear(b, "classifier.3", 4096, 4096)
    b.post(4096)
    linear(b, "classifier.6", 4096, 1000)
    return (
        _TV.format("vgg16", "vgg") + "; Simonyan & Zisserman, arXiv:1409.1556 (config D). "
        "Published: 138,357,544 params, 15.47 GMACs (224x224)."
    )


def _resnet(b: LayerBuilder, blocks: tuple[int, int, int, int], bottleneck: bool) -> None:
    """torchvision ResNet v1.5 (stride on the 3×3 conv of the bottleneck)."""
    hw = conv2d(b, "conv1", 3, 64, 7, (224, 224), stride=2, padding=3)
    batchnorm(b, "bn1", 64, hw, relu=True)
    hw = pool_out(hw, 3, 2, 1)
    b.post(9 * 64 * hw[0] * hw[1])  # MaxPool2d(3, 2, 1) right after the stem's ReLU
    expansion = 4 if bottleneck else 1
    inplanes = 64
    for stage, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks, strict=True), start=1):
        for i in range(n):
            p = f"layer{stage}.{i}"
            stride = 2 if (i == 0 and stage > 1) else 1
            cout = planes * expansion
            if bottleneck:
                h1 = conv2d(b, f"{p}.conv1", inplanes, planes, 1, hw)
                batchnorm(b, f"{p}.bn1", planes, h1, relu=True)
                h2 = conv2d(b, f"{p}.conv2", planes, planes, 3, h1, stride=stride, padding=1)
                batchnorm(b, f"{p}.bn2", planes, h2, relu=True)
                h3 = conv2d(b, f"{p}.conv3", planes, cout, 1, h2)
                batchnorm(b, f"{p}.bn3", cout, h3, relu=False)
            else:
                h1 = conv2d(b, f"{p}.conv1", inplanes, planes, 3, hw, stride=stride, padding=1)
                batchnorm(b, f"{p}.bn1", planes, h1, relu=True)
                h3 = conv2d(b, f"{p}.conv2", planes, planes, 3, h1, padding=1)
                batchnorm(b, f"{p}.bn2", planes, h3, relu=False)
            if stride != 1 or inplanes != cout:
                conv2d(b, f"{p}.downsample.0", inplanes, cout, 1, hw, stride=stride)
                batchnorm(b, f"{p}.downsample.1", cout, h3, relu=False)
            b.post(2 * cout * h3[0] * h3[1])  # residual add + ReLU, end of the block
            inplanes, hw = cout, h3
    b.between(inplanes * hw[0] * hw[1])  # global average pool, feeds fc
    linear(b, "fc", inplanes, 1000)


_RESNET_PUBLISHED = {
    "resnet18": ((2, 2, 2, 2), False, "11,689,512 params, 1.814 GMACs"),
    "resnet34": ((3, 4, 6, 3), False, "21,797,672 params, 3.664 GMACs"),
    "resnet50": ((3, 4, 6, 3), True, "25,557,032 params, 4.089 GMACs"),
    "resnet101": ((3, 4, 23, 3), True, "44,549,160 params, 7.801 GMACs"),
    "resnet152": ((3, 8, 36, 3), True, "60,192,808 params, 11.514 GMACs"),
}


def resnet(name: str):
    blocks, bottleneck, published = _RESNET_PUBLISHED[name]

    def build(b: LayerBuilder) -> str:
        _resnet(b, blocks, bottleneck)
        return (
            _TV.format(name, "resnet")
            + f" (ResNet v1.5); He et al., arXiv:1512.03385. Published: {published} (224x224)."
        )

    build.__doc__ = f"{name}, torchvision ResNet v1.5: {published} at 224×224."
    return build


def _basic(b: LayerBuilder, prefix: str, cin: int, cout: int, kernel, hw, stride=1, padding=0):
    """torchvision Inception's BasicConv2d: conv (no bias) + BatchNorm(eps=1e-3) + ReLU."""
    out = conv2d(b, f"{prefix}.conv", cin, cout, kernel, hw, stride=stride, padding=padding)
    batchnorm(b, f"{prefix}.bn", cout, out, relu=True)
    return out


def _avgpool3_then(b: LayerBuilder, c: int, hw) -> None:
    """F.avg_pool2d(x, 3, stride=1, padding=1) that feeds a branch_pool conv (attributed to it)."""
    b.between(9 * c * hw[0] * hw[1])


def inception_v3(b: LayerBuilder) -> str:
    """Inception v3 (Szegedy et al. 2016) with the auxiliary classifier, as trained.

    torchvision: 27,161,264 parameters (23,834,568 without AuxLogits),
    5.713 GMACs at 299×299 (evaluation mode, no auxiliary head).

    Long because it declares one layer per line, in the order of the network; nothing to split.
    """
    hw = _basic(b, "Conv2d_1a_3x3", 3, 32, 3, (299, 299), stride=2)
    hw = _basic(b, "Conv2d_2a_3x3", 32, 32, 3, hw)
    hw = _basic(b, "Conv2d_2b_3x3", 32, 64, 3, hw, padding=1)
    hw = pool_out(hw, 3, 2)
    b.post(9 * 64 * hw[0] * hw[1])  # maxpool1
    hw = _basic(b, "Conv2d_3b_1x1", 64, 80, 1, hw)
    hw = _basic(b, "Conv2d_4a_3x3", 80, 192, 3, hw)
    hw = pool_out(hw, 3, 2)
    b.post(9 * 192 * hw[0] * hw[1])  # maxpool2

    def block_a(p, cin, pool_features):
        _basic(b, f"{p}.branch1x1", cin, 64, 1, hw)
        _basic(b, f"{p}.branch5x5_1", cin, 48, 1, hw)
        _basic(b, f"{p}.branch5x5_2", 48, 64, 5, hw, padding=2)
        _basic(b, f"{p}.branch3x3dbl_1", cin, 64, 1, hw)
        _basic(b, f"{p}.branch3x3dbl_2", 64, 96, 3, hw, padding=1)
        _basic(b, f"{p}.branch3x3dbl_3", 96, 96, 3, hw, padding=1)
        _avgpool3_then(b, cin, hw)
        _basic(b, f"{p}.branch_pool", cin, pool_features, 1, hw)
        return 64 + 64 + 96 + pool_features

    def block_c(p, c7):
        cin = 768
        _basic(b, f"{p}.branch1x1", cin, 192, 1, hw)
        _basic(b, f"{p}.branch7x7_1", cin, c7, 1, hw)
        _basic(b, f"{p}.branch7x7_2", c7, c7, (1, 7), hw, padding=(0, 3))
        _basic(b, f"{p}.branch7x7_3", c7, 192, (7, 1), hw, padding=(3, 0))
        _basic(b, f"{p}.branch7x7dbl_1", cin, c7, 1, hw)
        _basic(b, f"{p}.branch7x7dbl_2", c7, c7, (7, 1), hw, padding=(3, 0))
        _basic(b, f"{p}.branch7x7dbl_3", c7, c7, (1, 7), hw, padding=(0, 3))
        _basic(b, f"{p}.branch7x7dbl_4", c7, c7, (7, 1), hw, padding=(3, 0))
        _basic(b, f"{p}.branch7x7dbl_5", c7, 192, (1, 7), hw, padding=(0, 3))
        _avgpool3_then(b, cin, hw)
        _basic(b, f"{p}.branch_pool", cin, 192, 1, hw)

    def block_e(p, cin):
        _basic(b, f"{p}.branch1x1", cin, 320, 1, hw)
        _basic(b, f"{p}.branch3x3_1", cin, 384, 1, hw)
        _basic(b, f"{p}.branch3x3_2a", 384, 384, (1, 3), hw, padding=(0, 1))
        _basic(b, f"{p}.branch3x3_2b", 384, 384, (3, 1), hw, padding=(1, 0))
        _basic(b, f"{p}.branch3x3dbl_1", cin, 448, 1, hw)
        _basic(b, f"{p}.branch3x3dbl_2", 448, 384, 3, hw, padding=1)
        _basic(b, f"{p}.branch3x3dbl_3a", 384, 384, (1, 3), hw, padding=(0, 1))
        _basic(b, f"{p}.branch3x3dbl_3b", 384, 384, (3, 1), hw, padding=(1, 0))
        _avgpool3_then(b, cin, hw)
        _basic(b, f"{p}.branch_pool", cin, 192, 1, hw)
        return 2048

    c = block_a("Mixed_5b", 192, 32)
    c = block_a("Mixed_5c", c, 64)
    c = block_a("Mixed_5d", c, 64)
    # Mixed_6a (InceptionB): 35×35 -> 17×17
    out = _basic(b, "Mixed_6a.branch3x3", c, 384, 3, hw, stride=2)
    _basic(b, "Mixed_6a.branch3x3dbl_1", c, 64, 1, hw)
    _basic(b, "Mixed_6a.branch3x3dbl_2", 64, 96, 3, hw, padding=1)
    _basic(b, "Mixed_6a.branch3x3dbl_3", 96, 96, 3, hw, stride=2)
    b.between(9 * c * out[0] * out[1])  # max-pool branch; concatenated, feeds Mixed_6b
    hw = out
    for p, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        block_c(p, c7)
    # AuxLogits (InceptionAux), run on Mixed_6e's output in training mode.
    aux_hw = pool_out(hw, 5, 3)
    b.between(25 * 768 * aux_hw[0] * aux_hw[1])  # avg_pool2d(5, stride=3)
    aux_hw = _basic(b, "AuxLogits.conv0", 768, 128, 1, aux_hw)
    aux_hw = _basic(b, "AuxLogits.conv1", 128, 768, 5, aux_hw)
    linear(b, "AuxLogits.fc", 768, 1000)  # adaptive avg pool on 1×1: identity
    # Mixed_7a (InceptionD): 17×17 -> 8×8
    _basic(b, "Mixed_7a.branch3x3_1", 768, 192, 1, hw)
    out = _basic(b, "Mixed_7a.branch3x3_2", 192, 320, 3, hw, stride=2)
    _basic(b, "Mixed_7a.branch7x7x3_1", 768, 192, 1, hw)
    _basic(b, "Mixed_7a.branch7x7x3_2", 192, 192, (1, 7), hw, padding=(0, 3))
    _basic(b, "Mixed_7a.branch7x7x3_3", 192, 192, (7, 1), hw, padding=(3, 0))
    _basic(b, "Mixed_7a.branch7x7x3_4", 192, 192, 3, hw, stride=2)
    b.between(9 * 768 * out[0] * out[1])  # max-pool branch
    hw = out
    c = block_e("Mixed_7b", 1280)
    c = block_e("Mixed_7c", c)
    b.between(c * hw[0] * hw[1])  # adaptive average pool to 1×1, feeds fc
    linear(b, "fc", 2048, 1000)
    return (
        _TV.format("inception_v3", "inception")
        + " with aux_logits=True; Szegedy et al., arXiv:1512.00567. Published: 27,161,264 "
        "params (23,834,568 without AuxLogits), 5.713 GMACs (299x299, eval mode)."
    )
