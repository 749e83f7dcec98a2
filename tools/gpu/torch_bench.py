#!/usr/bin/env python3
"""PyTorch's training throughput on AlexNet or ResNet-18, for comparison in
the same run.

torch_bench.py MODE TF32 [BATCH] [SIZE] [MODEL]: MODEL alexnet (default) or
resnet18 (torchvision's), MODE eager (cudnn.benchmark on) or
compile (torch.compile); TF32 0 or 1, or bf16 (TF32 on, and the forward
pass and loss under torch.autocast in bfloat16, as --mixed-precision=bf16). SGD with momentum 0.9 and weight
decay 5e-4, lr 0.01, cross-entropy, synthetic data already on the GPU (as
the lwcc trainer's --data=synthetic uploads a batch per step, which makes
this comparison slightly favour PyTorch). Prints "img_per_s X".
"""
import sys
import time

import torch
import torchvision

mode, tf32, bf16 = sys.argv[1], sys.argv[2] in ("1", "bf16"), sys.argv[2] == "bf16"
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 128
size = int(sys.argv[4]) if len(sys.argv) > 4 else 224
net = sys.argv[5] if len(sys.argv) > 5 else "alexnet"
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
model = getattr(torchvision.models, net)(num_classes=1000).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(batch, 3, size, size, device="cuda")
y = torch.randint(0, 1000, (batch,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss


if mode == "compile":
    step = torch.compile(step)
for _ in range(15):
    step()
torch.cuda.synchronize()
n = 60
t0 = time.perf_counter()
for _ in range(n):
    step()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"img_per_s {batch * n / dt:.1f}")
