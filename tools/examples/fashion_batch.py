#!/usr/bin/env python3
"""Writes one Fashion-MNIST batch as ONNX TensorProto files for lwcc.

    fashion_batch.py DATA_DIR OUT_DIR [--batch 32] [--offset 0] [--split train]

DATA_DIR holds the IDX files (train-images-idx3-ubyte.gz, ...), as Debian's
dataset-fashion-mnist installs them under /usr/share/datasets/fashion-mnist.
OUT_DIR receives input_0.pb (float32 [N,1,28,28], scaled to [0,1] and
normalized with the data set's mean 0.2860 and std 0.3530) and input_1.pb
(int64 [N] class labels), and the same arrays as raw bytes in input_0.bin
and input_1.bin (what a compiled trainer's --data=raw:DIR reads).
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np
from onnx import numpy_helper


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        sys.exit(f"{path}: not an IDX file (too short)")
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        sys.exit(f"{path}: holds {body.size} bytes, its header says {int(np.prod(dims))}")
    return body.reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--split", choices=["train", "t10k"], default="train")
    a = ap.parse_args()
    images = read_idx(os.path.join(a.data_dir, f"{a.split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(a.data_dir, f"{a.split}-labels-idx1-ubyte.gz"))
    sl = slice(a.offset, a.offset + a.batch)
    x = (images[sl].astype(np.float32) / 255.0 - 0.2860) / 0.3530
    x = x.reshape(-1, 1, 28, 28)
    y = labels[sl].astype(np.int64)
    os.makedirs(a.out_dir, exist_ok=True)
    for k, arr in enumerate([x, y]):
        with open(os.path.join(a.out_dir, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr).SerializeToString())
        np.ascontiguousarray(arr).tofile(os.path.join(a.out_dir, f"input_{k}.bin"))
    print(f"{len(y)} {a.split} images from {a.data_dir} -> {a.out_dir}")


if __name__ == "__main__":
    main()
