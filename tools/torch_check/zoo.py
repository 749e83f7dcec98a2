"""The models of check.py's zoo set: popular networks outside torchvision.

timm's classifiers (`pip install timm` in the PyTorch venv) from the model
collections users bring, chosen for the patterns they carry, plus a few small
networks written here for what no classifier carries (U-Net and feature
pyramid upsampling, every activation PyTorch exports as its own ONNX op):

  hard activations      mobilenetv3_small_050, mobilenetv3_large_100, lcnet_050,
                        fbnetv3_b, hardcorenas_a, ghostnet_050, ese_vovnet19b_dw
  upsampling (Resize)   hrnet_w18_small (nearest), lraspp_mobilenet_v3_large
                        (torchvision segmentation, bilinear), unet_small,
                        fpn_small (written here)
  stateless batch norm  nf_resnet26, nf_regnet_b0 (weight standardization)
  LeakyReLU at its kink cspdarknet53 (zero-initialized last batch norm per block)
  other blocks          dla34, dpn68, seresnext26d_32x4d, tf_efficientnet_b0,
                        rexnet_100, regnetx_002, resnest14d, skresnet18, mixnet_s,
                        tinynet_a, res2net50_14w_8s, mobilevit_xxs, poolformer_s12
  transformers, mixers  vit_tiny_patch16_224, mixer_s16_224 (at 64x64)
  activations           acts_small (written here): ELU, SELU, CELU, Mish, Softplus,
                        Softsign, PReLU (per channel and shared), ReLU6, Hardtanh

Every model ends in [N, classes] logits: segmentation networks are averaged
over their output map, so that check.py's cross-entropy step applies.
"""

NUM_CLASSES = 10

TIMM = {
    "mobilenetv3_small_050": {}, "mobilenetv3_large_100": {}, "lcnet_050": {},
    "fbnetv3_b": {}, "hardcorenas_a": {}, "ghostnet_050": {}, "ese_vovnet19b_dw": {},
    "hrnet_w18_small": {}, "nf_resnet26": {}, "nf_regnet_b0": {}, "cspdarknet53": {},
    "dla34": {}, "dpn68": {}, "seresnext26d_32x4d": {}, "tf_efficientnet_b0": {},
    "rexnet_100": {}, "regnetx_002": {}, "resnest14d": {}, "skresnet18": {}, "mixnet_s": {},
    "tinynet_a": {}, "res2net50_14w_8s": {}, "mobilevit_xxs": {}, "poolformer_s12": {},
    "vit_tiny_patch16_224": {"img_size": 64}, "mixer_s16_224": {"img_size": 64},
}
LOCAL = ["lraspp_mobilenet_v3_large", "unet_small", "fpn_small", "acts_small"]
# check.py's sweep set (`--set sweep`): today's timm families at 64x64 (or
# the smallest size the model takes): hybrid convolution/attention networks,
# vision transformers with distillation tokens and attention biases,
# split-attention and selective-kernel ResNets, re-parameterizable blocks,
# MLP-style models, a shifted-window transformer and one with sinusoidal
# position encodings computed in its forward pass.
SWEEP_TIMM = {
    "coatnet_nano_rw_224": {"img_size": 64},          # hybrid: MBConv + relative attention
    "efficientformerv2_s0": {"img_size": 64},         # hybrid: conv FFNs + attention biases
    "levit_128s": {"img_size": 64},                   # attention biases, distillation head
    "deit_tiny_distilled_patch16_224": {"img_size": 64},  # cls + distillation tokens
    "resnest26d": {},                                 # split attention
    "skresnet34": {},                                 # selective kernel
    "repvgg_a0": {},                                  # re-parameterizable 3x3+1x1+identity
    "mobileone_s0": {},                               # re-parameterizable, over-parameterized
    "resmlp_12_224": {"img_size": 64},                # MLP: affine norms, token mixing
    "swin_tiny_patch4_window7_224": {"img_size": 64, "window_size": 4},  # shifted windows
    "xcit_nano_12_p16_224": {"img_size": 64},         # Fourier position encoding, XCA
}
TIMM.update(SWEEP_TIMM)
SWEEP = list(SWEEP_TIMM)
MODELS = [m for m in TIMM if m not in SWEEP_TIMM] + LOCAL
# Input sizes other than check.py's 64x64.
SIZE = {}


def _local(torch, torchvision, name):
    nn, F = torch.nn, torch.nn.functional

    def cbr(cin, cout, act=None):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                             act or nn.ReLU())

    class MeanLogits(nn.Module):
        """A segmentation network's map averaged into [N, classes] logits."""

        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            y = self.net(x)
            return (y["out"] if isinstance(y, dict) else y).mean((2, 3))

    class UNetSmall(nn.Module):
        """Three levels; the decoder upsamples by nearest, bilinear and
        bilinear with align_corners, then once to an explicit size."""

        def __init__(self):
            super().__init__()
            self.e1, self.e2, self.e3 = cbr(3, 8), cbr(8, 12), cbr(12, 16)
            self.d2, self.d1 = cbr(16 + 12, 12), cbr(12 + 8, 8)
            self.head = nn.Conv2d(8, NUM_CLASSES, 1)

        def forward(self, x):
            x1 = self.e1(x)
            x2 = self.e2(F.max_pool2d(x1, 2))
            x3 = self.e3(F.max_pool2d(x2, 2))
            u2 = F.interpolate(x3, scale_factor=2, mode="nearest")
            y2 = self.d2(torch.cat([u2, x2], 1))
            u1 = F.interpolate(y2, scale_factor=2, mode="bilinear", align_corners=False)
            u1 = u1 + F.interpolate(y2, size=x1.shape[-2:], mode="bilinear", align_corners=True)
            y1 = self.d1(torch.cat([u1, x1], 1))
            return self.head(y1).mean((2, 3))

    class FpnSmall(nn.Module):
        """A feature pyramid: laterals summed with the level above upsampled
        (nearest, to the lateral's size), a 5x5 -> 8x8 bilinear (a scale
        that is no integer) on the way."""

        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.c3 = cbr(3, 8), cbr(8, 16), cbr(16, 24)
            self.l1, self.l2, self.l3 = (nn.Conv2d(c, 8, 1) for c in (8, 16, 24))
            self.fc = nn.Linear(8, NUM_CLASSES)

        def forward(self, x):
            f1 = self.c1(F.max_pool2d(x, 2))      # 32x32
            f2 = self.c2(F.max_pool2d(f1, 2))     # 16x16
            f3 = self.c3(F.max_pool2d(f2, 3))     # 5x5
            p3 = self.l3(f3)
            p3 = F.interpolate(p3, size=(8, 8), mode="bilinear", align_corners=False)
            p2 = self.l2(f2) + F.interpolate(p3, size=f2.shape[-2:], mode="nearest")
            p1 = self.l1(f1) + F.interpolate(p2, scale_factor=2.0, mode="nearest")
            return self.fc(p1.mean((2, 3)))

    class ActsSmall(nn.Module):
        """A conv + batch norm + activation per activation PyTorch exports as
        an ONNX op of its own (and ReLU6 and Hardtanh, exported as Clip)."""

        def __init__(self):
            super().__init__()
            acts = [nn.ELU(0.7), nn.SELU(), nn.CELU(1.3), nn.Mish(), nn.Softplus(),
                    nn.Softsign(), nn.PReLU(8, 0.2), nn.PReLU(), nn.ReLU6(), nn.Hardtanh(-0.5, 0.5),
                    nn.Hardswish(), nn.Hardsigmoid()]
            layers, cin = [], 3
            for a in acts:
                layers.append(cbr(cin, 8, a))
                cin = 8
            self.body = nn.Sequential(*layers)
            self.fc = nn.Linear(8, NUM_CLASSES)

        def forward(self, x):
            return self.fc(self.body(F.max_pool2d(x, 4)).mean((2, 3)))

    if name == "lraspp_mobilenet_v3_large":
        seg = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=NUM_CLASSES)
        return MeanLogits(seg)
    return {"unet_small": UNetSmall, "fpn_small": FpnSmall, "acts_small": ActsSmall}[name]()


def build(torch, torchvision, name):
    """The zoo model `name` with random weights (seed 0)."""
    torch.manual_seed(0)
    if name in TIMM:
        import timm
        # No dropout (some heads call F.dropout in training mode, which
        # check.py cannot switch off by module) and no stochastic depth: an
        # eval-mode export has neither, and lwcc would draw its own masks.
        kw = dict(pretrained=False, num_classes=NUM_CLASSES, drop_rate=0.0, **TIMM[name])
        try:
            model = timm.create_model(name, drop_path_rate=0.0, **kw)
        except TypeError:  # a network without stochastic depth
            model = timm.create_model(name, **kw)
    else:
        model = _local(torch, torchvision, name)
    return _float32_constants(model) if name in FLOAT32_CONSTANTS else model


# Normalizer-free nets multiply by Python floats (a block's alpha and beta,
# the activation's gamma, the weight standardization's scale): both exporters
# write these as float32 constant tensors, so PyTorch's float64 reference gets
# them rounded as in the ONNX file (without it nf_resnet26's float64 loss
# differs from lwcc's by 4e-9 relative). Floats the exporters write as
# attributes (eps, slopes) stay: lwcc reads those as the decimal written.
FLOAT32_CONSTANTS = {"nf_resnet26", "nf_regnet_b0"}
ROUNDED = ("alpha", "beta", "gamma", "scale")


def _float32_constants(model):
    """`model` with its modules' ROUNDED float attributes rounded to float32."""
    import numpy as np
    for m in model.modules():
        for k, v in list(vars(m).items()):
            if k in ROUNDED and type(v) is float:
                setattr(m, k, float(np.float32(v)))
    return model
