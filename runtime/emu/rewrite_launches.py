#!/usr/bin/env python3
"""emu/rewrite_launches.py - CUDA sources as host C++ for the emulated device.

The one construct of CUDA C++ that host C++ cannot parse is the launch
`kernel<<<grid, block, shared, stream>>>(args)`. This script copies a CUDA
source to OUT with every launch written as a call of the emulator's launcher
(lwemu/cuda_emu.h):

    ::lwemu::launch("kernel", __FILE__, __LINE__,
                    [=](auto... a) { kernel(a...); }, grid, block, shared, stream)(args)

on the same line, so compiler messages keep the source's line numbers. The
kernel's template arguments are deduced from the arguments as nvcc deduces
them; the arguments are evaluated once, at the launch, and copied as CUDA
copies a kernel's parameters. Nothing else of the source changes: the CUDA
code stays written for nvcc.

    rewrite_launches.py IN OUT
"""
import os
import sys

IDENT = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")


def kernel_start(text, end):
    """The start of the kernel expression that ends before `end` (an id-expression,
    maybe qualified, maybe with template arguments)."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":  # template arguments: match the angle brackets
        depth = 0
        while i > 0:
            i -= 1
            c = text[i]
            if c == ">":
                depth += 1
            elif c == "<":
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and text[i - 1] in IDENT:
        i -= 1
    return i


def rewrite(text, path):
    out = []
    pos = 0
    while True:
        at = text.find("<<<", pos)
        if at < 0:
            out.append(text[pos:])
            return "".join(out)
        line_start = text.rfind("\n", 0, at) + 1
        if "//" in text[line_start:at]:  # in a comment
            out.append(text[pos : at + 3])
            pos = at + 3
            continue
        start = kernel_start(text, at)
        kernel = text[start:at].strip()
        close = text.find(">>>", at)
        if not kernel or close < 0:
            line = text.count("\n", 0, at) + 1
            sys.exit(f"{path}:{line}: a kernel launch the emulator's rewrite cannot read")
        config = text[at + 3 : close]
        paren = close + 3
        while paren < len(text) and text[paren].isspace():
            paren += 1
        if paren >= len(text) or text[paren] != "(":
            line = text.count("\n", 0, at) + 1
            sys.exit(f"{path}:{line}: a kernel launch without its argument list")
        name = " ".join(kernel.split()).replace('"', "'")
        out.append(text[pos:start])
        out.append(
            f'::lwemu::launch("{name}", __FILE__, __LINE__, '
            f"[=](auto... lwemu_a) {{ {kernel}(lwemu_a...); }}, {config})"
        )
        pos = paren  # the argument list stays as it is


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: rewrite_launches.py IN OUT")
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    # #line keeps __FILE__ and diagnostics pointing at the CUDA source.
    result = f'#line 1 "{os.path.abspath(src)}"\n' + rewrite(text, src)
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    old = None
    if os.path.exists(dst):
        with open(dst, encoding="utf-8") as f:
            old = f.read()
    if old != result:  # unchanged output keeps its time stamp (no rebuild)
        with open(dst, "w", encoding="utf-8") as f:
            f.write(result)


if __name__ == "__main__":
    main()
