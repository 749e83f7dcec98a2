#!/usr/bin/env python3
"""Image data for the trainer: --data=folder:DIR and --data=cifar10:DIR.

The test makes its own data with Pillow (test tooling): a learnable image
folder of 4 classes (a colored shape on a cluttered background: red circles,
green squares, blue triangles, yellow crosses), 240 training and 60
validation images of 40 to 160 pixels a side, in every format the loader
reads (baseline, 4:4:4, progressive, grayscale and CMYK JPEG; RGB, RGBA,
gray+alpha, palette with and without transparency, gray, 1-bit and 16-bit
gray PNG, and an Adam7-interlaced PNG written by hand), and CIFAR-10 binary
files. Checks, each a test case:
  - every format decodes to Pillow's pixels (build/bin/lwcc-images dump, the
    loader outside a trainer): 3 channels and 1 (Pillow's convert("L")),
    gray replicated, alpha dropped, CMYK converted as Pillow does;
  - the evaluation transform (shorter side to size / 0.875, center crop)
    and the plain resize match Pillow's bilinear resize and crop, as
    torchvision composes them; JPEGs far larger than the crop (DCT-domain
    scaling) stay close to them; --augment=standard draws other crops each
    epoch, the same ones for the same (seed, epoch);
  - the evaluation split follows the training transform: the resized whole
    image after --augment=none|flip, the center crop after standard or with
    --eval-crop=F, as Pillow computes them; the trainer's first lines name
    both transforms, and a bad --eval-crop exits 2;
  - CIFAR-10 files written by the test read back to their images and labels
    (3 channels and luma), and a trainer on them reports top-5 accuracy
    that agrees with its own dumped logits;
  - the zoo LeNet (32x32) and AlexNet (64x64) train on the folder well above
    chance (0.25): eval lines with top-1 and top-5 in the progress output
    and the JSONL log, the classes and images found printed;
  - with --augment=standard, 1 and 4 loader threads (and another prefetch
    depth) give bit-identical weights, and a run killed with SIGKILL after a
    checkpoint and resumed ends bit-identical to an uninterrupted one;
  - bad input: a truncated JPEG and PNG, corrupt headers, entropy data
    corrupted mid-file (found only when decoding), an empty file, text and a
    GIF under image names, an empty class folder, an unreadable folder (a
    symbolic-link loop), a validation class the training split lacks, too
    few logits for the classes, a missing folder: exit 1 with a message
    naming the file; --skip-bad-images trains without them after one
    warning naming them with their count; bad flags exit 2;
  - a fuzz of the decoders' path: mutated JPEG and PNG files through the
    loader (in memory and as image folders) under AddressSanitizer and
    UBSan (build/bin/lwcc-images-asan fuzz), without a crash.
Ends with the line "N passed, M failed".
"""
import glob
import io
import json
import os
import random
import re
import shutil
import struct
import sys
import tempfile
import zlib

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BIN, GEN, LWCC  # noqa: E402

IMAGES = os.path.join(BIN, "lwcc-images")
IMAGES_ASAN = os.path.join(BIN, "lwcc-images-asan")
CLASSES = ["a_circle", "b_square", "c_triangle", "d_cross"]
COLORS = [(220, 40, 40), (40, 200, 60), (50, 70, 230), (230, 210, 40)]


def case(fn):
    harness.case(fn, timed=True)


def run(cmd, expect=0, timeout=600):
    return harness.check_output(cmd, expect=expect, timeout=timeout)


# --- data made by the test -------------------------------------------------------

def draw(rng, cls, w, h):
    """A colored shape of class `cls` on a cluttered background."""
    im = Image.new("RGB", (w, h), tuple(rng.randint(60, 190) for _ in range(3)))
    d = ImageDraw.Draw(im)
    for _ in range(6):
        x, y, r = rng.randint(0, w), rng.randint(0, h), rng.randint(2, max(3, min(w, h) // 8))
        d.ellipse([x - r, y - r, x + r, y + r], fill=tuple(rng.randint(60, 190) for _ in range(3)))
    s = rng.uniform(0.6, 0.9) * min(w, h)
    cx, cy = rng.uniform(s / 2, w - s / 2), rng.uniform(s / 2, h - s / 2)
    c = tuple(max(0, min(255, v + rng.randint(-25, 25))) for v in COLORS[cls])
    x0, y0, x1, y1 = cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2
    if cls == 0:
        d.ellipse([x0, y0, x1, y1], fill=c)
    elif cls == 1:
        d.rectangle([x0, y0, x1, y1], fill=c)
    elif cls == 2:
        d.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=c)
    else:
        t = s / 3
        d.rectangle([cx - t / 2, y0, cx + t / 2, y1], fill=c)
        d.rectangle([x0, cy - t / 2, x1, cy + t / 2], fill=c)
    return im


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def interlaced_png(im):
    """An 8-bit RGB PNG with Adam7 interlacing (Pillow writes none)."""
    a = np.asarray(im.convert("RGB"))
    h, w = a.shape[:2]
    raw = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                           (1, 0, 2, 2), (0, 1, 1, 2)):
        sub = a[y0::dy, x0::dx]
        if sub.size:
            raw += b"".join(b"\0" + row.tobytes() for row in sub)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1))
            + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


# Every format, by name: (extension, how to write it).
FORMATS = {
    "jpeg": (".jpg", lambda im, p: im.save(p, quality=88)),
    "jpeg444": (".jpeg", lambda im, p: im.save(p, quality=92, subsampling=0)),
    "progressive": (".jpg", lambda im, p: im.save(p, quality=90, progressive=True)),
    "gray_jpeg": (".JPG", lambda im, p: im.convert("L").save(p, quality=90)),
    "cmyk_jpeg": (".jpg", lambda im, p: im.convert("CMYK").save(p, quality=92)),
    "png": (".png", lambda im, p: im.save(p)),
    "rgba_png": (".png", lambda im, p: im.convert("RGBA").save(p)),
    "la_png": (".png", lambda im, p: im.convert("LA").save(p)),
    "palette_png": (".png", lambda im, p: im.convert("P", palette=Image.ADAPTIVE, colors=32)
                    .save(p, transparency=0)),
    "palette_opaque_png": (".PNG", lambda im, p: im.convert("P", palette=Image.ADAPTIVE,
                                                            colors=200).save(p)),
    "gray_png": (".png", lambda im, p: im.convert("L").save(p)),
    "bit_png": (".png", lambda im, p: im.convert("1").save(p)),
    "gray16_png": (".png", lambda im, p: Image.fromarray(
        (np.asarray(im.convert("L")).astype(np.uint16) * 257)).save(p)),
    "interlaced_png": (".png", lambda im, p: open(p, "wb").write(interlaced_png(im))),
}
FORMAT_CYCLE = ["jpeg"] * 6 + ["jpeg444", "progressive", "progressive", "gray_jpeg", "cmyk_jpeg",
                                "png", "png", "rgba_png", "la_png", "palette_png",
                                "palette_opaque_png", "gray_png", "gray16_png", "interlaced_png"]


def make_folder(root, train=60, val=15, seed=0):
    rng = random.Random(seed)
    k = 0
    for split, n in (("train", train), ("val", val)):
        for cls, name in enumerate(CLASSES):
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            for i in range(n):
                im = draw(rng, cls, rng.randint(40, 160), rng.randint(40, 160))
                ext, write = FORMATS[FORMAT_CYCLE[k % len(FORMAT_CYCLE)]]
                write(im, os.path.join(root, split, name, f"{i:03d}{ext}"))
                k += 1


def pillow_pixels(path, channels):
    """What Pillow decodes, converted as torchvision's loader does (RGB; or
    L, from RGB for color images)."""
    im = Image.open(path)
    if im.mode == "I;16":  # Pillow clips 16 bits to 8; the loader keeps the high byte
        a = (np.asarray(im).astype(np.uint32) >> 8).astype(np.float32)[None]
        return a if channels == 1 else np.repeat(a, 3, axis=0)
    if channels == 1:
        im = im.convert("L") if im.mode in ("L", "LA", "1") else im.convert("RGB").convert("L")
        return np.asarray(im, np.float32)[None]
    return np.asarray(im.convert("RGB"), np.float32).transpose(2, 0, 1)


def dump(data, shape, *flags, split="train"):
    out = os.path.join(TMP, "dump.bin")
    run([IMAGES, "dump", f"--data={data}", f"--shape={','.join(map(str, shape))}",
         f"--split={split}", *flags, "-o", out])
    n = os.path.getsize(out) // (4 * shape[1] * shape[2] * shape[3])
    return (np.fromfile(out, np.float32).reshape(n, *shape[1:]),
            np.fromfile(out + ".labels", np.int64))


def read_params(folder):
    return {os.path.basename(p): open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(folder, "param_*.bin")))}


def build_trainer(name, *gen_flags, lr=None):
    model = os.path.join(TMP, name + ".onnx")
    run([sys.executable, GEN, *gen_flags, "-o", model])
    exe = os.path.join(TMP, name + "-trainer")
    run([LWCC, model, "--target=cpu", "-o", exe, *([f"--lr={lr}"] if lr else [])])
    return exe


# --- cases ----------------------------------------------------------------------

def decode_formats():
    """Each format, at its own size (no resampling), against Pillow."""
    folder = os.path.join(TMP, "formats")
    rng = random.Random(7)
    base = draw(rng, 2, 24, 20)
    for name, (ext, write) in FORMATS.items():
        os.makedirs(os.path.join(folder, "train", name))
        write(base, os.path.join(folder, "train", name, "image" + ext))
    names = sorted(FORMATS)
    for channels in (3, 1):
        got, labels = dump(f"folder:{folder}", (1, channels, 20, 24), "--augment=none",
                           "--mean=0", "--std=1")
        assert list(labels) == list(range(len(names))), labels
        for k, name in enumerate(names):
            path = glob.glob(os.path.join(folder, "train", name, "*"))[0]
            want = pillow_pixels(path, channels)
            if want.shape[0] == 1 and channels == 3:
                want = np.repeat(want, 3, axis=0)
            err = float(np.max(np.abs(got[k] * 255.0 - want)))
            # JPEG: the same libjpeg-turbo arithmetic, but gray from color
            # is the JPEG's own luma (Y), Pillow's from decoded RGB.
            tol = 0.01 if name.endswith("png") else (1.01 if channels == 3 else 3.01)
            assert err <= tol, f"{name}, {channels} channels: off Pillow by {err} levels"


def transforms_match_pillow():
    folder = os.path.join(TMP, "resize")
    rng = random.Random(3)
    sizes = [(50, 40), (40, 50), (97, 61), (33, 33), (160, 90), (32, 48)]
    for k, (w, h) in enumerate(sizes):
        os.makedirs(os.path.join(folder, "train", f"c{k}"))
        draw(rng, k % 4, w, h).save(os.path.join(folder, "train", f"c{k}", "x.png"))
    images = [Image.open(glob.glob(os.path.join(folder, "train", f"c{k}", "*"))[0]).convert("RGB")
              for k in range(len(sizes))]
    # Evaluation: Resize(int(32 / 0.875)) on the shorter side, CenterCrop(32).
    got, _ = dump(f"folder:{folder}", (1, 3, 32, 32), "--augment=eval", "--mean=0", "--std=1")
    for k, im in enumerate(images):
        w, h = im.size
        side = int(32 / 0.875)
        nw, nh = (side, int(side * h / w)) if w <= h else (int(side * w / h), side)
        r = im.resize((nw, nh), Image.BILINEAR)
        top, left = int(round((nh - 32) / 2.0)), int(round((nw - 32) / 2.0))
        want = np.asarray(r.crop((left, top, left + 32, top + 32)), np.float32).transpose(2, 0, 1)
        err = float(np.max(np.abs(got[k] * 255 - want)))
        # Pillow rounds to bytes between its two passes; the loader keeps floats.
        assert err <= 1.51, f"eval transform of a {w}x{h} image: off Pillow by {err} levels"
    # --augment=none: Resize((H, W)), the aspect not kept.
    got, _ = dump(f"folder:{folder}", (1, 3, 24, 40), "--augment=none", "--mean=0", "--std=1")
    for k, im in enumerate(images):
        want = np.asarray(im.resize((40, 24), Image.BILINEAR), np.float32).transpose(2, 0, 1)
        err = float(np.max(np.abs(got[k] * 255 - want)))
        assert err <= 1.51, f"resize of {im.size}: off Pillow by {err} levels"
    # Normalization: ImageNet's statistics by default.
    norm, _ = dump(f"folder:{folder}", (1, 3, 24, 40), "--augment=none")
    mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
    std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
    assert np.allclose(norm, (got - mean) / std, atol=1e-5), "default normalization"
    # A JPEG much larger than the crop decodes at 1/8 scale (DCT domain):
    # close to Pillow's full decode and resize, not equal.
    big = os.path.join(TMP, "big")
    os.makedirs(os.path.join(big, "train", "a"))
    draw(random.Random(5), 0, 400, 300).save(os.path.join(big, "train", "a", "x.jpg"), quality=92)
    got, _ = dump(f"folder:{big}", (1, 3, 32, 32), "--augment=eval", "--mean=0", "--std=1")
    im = Image.open(os.path.join(big, "train", "a", "x.jpg")).convert("RGB")
    r = im.resize((48, 36), Image.BILINEAR)
    want = np.asarray(r.crop((8, 2, 40, 34)), np.float32).transpose(2, 0, 1)
    mad = float(np.mean(np.abs(got[0] * 255 - want)))
    print(f"  400x300 JPEG to 32x32 through 1/8 DCT scaling: {mad:.2f} levels from Pillow on average")
    assert mad < 6, f"DCT-scaled decode off Pillow by {mad} levels on average"
    # Random resized crops: another crop each epoch, the same for the same
    # (seed, epoch), and a seed changes them.
    a0, _ = dump(f"folder:{folder}", (1, 3, 32, 32), "--augment=standard", "--epoch=0")
    a0b, _ = dump(f"folder:{folder}", (1, 3, 32, 32), "--augment=standard", "--epoch=0")
    a1, _ = dump(f"folder:{folder}", (1, 3, 32, 32), "--augment=standard", "--epoch=1")
    s1, _ = dump(f"folder:{folder}", (1, 3, 32, 32), "--augment=standard", "--seed=1")
    assert a0.tobytes() == a0b.tobytes(), "the same (seed, epoch) gave other crops"
    assert all(np.any(a0[k] != a1[k]) for k in range(len(sizes))), "an epoch kept its crop"
    assert all(np.any(a0[k] != s1[k]) for k in range(len(sizes))), "a seed kept its crop"


def eval_transform_follows_training():
    """The evaluation split as a trainer reads it (lwcc-images dump --split=eval):
    after --augment=none or flip the resized whole image; after standard, or
    with --eval-crop=F whatever --augment, Resize(int(size / F)) + CenterCrop;
    the trainer's first lines name both splits' transforms."""
    folder = os.path.join(TMP, "evalsplit")
    rng = random.Random(7)
    sizes = [(50, 40), (40, 50), (97, 61), (33, 33)]
    for split in ("train", "val"):
        for k, (w, h) in enumerate(sizes):
            os.makedirs(os.path.join(folder, split, f"c{k}"))
            draw(rng, k % 4, w, h).save(os.path.join(folder, split, f"c{k}", "x.png"))
    images = [Image.open(os.path.join(folder, "val", f"c{k}", "x.png")).convert("RGB")
              for k in range(len(sizes))]

    def whole(im):
        return np.asarray(im.resize((32, 32), Image.BILINEAR), np.float32).transpose(2, 0, 1)

    def center(im, fraction):
        w, h = im.size
        side = int(32 / fraction)
        nw, nh = (side, int(side * h / w)) if w <= h else (int(side * w / h), side)
        r = im.resize((nw, nh), Image.BILINEAR)
        top, left = int(round((nh - 32) / 2.0)), int(round((nw - 32) / 2.0))
        return np.asarray(r.crop((left, top, left + 32, top + 32)),
                          np.float32).transpose(2, 0, 1)

    out = os.path.join(TMP, "eval-dump.bin")
    for flags, want, note in (
            (["--augment=none"], whole, "evaluation transform: Resize(32x32)"),
            (["--augment=flip"], whole, "evaluation transform: Resize(32x32)"),
            (["--augment=standard"], lambda im: center(im, 0.875),
             "evaluation transform: Resize(36) + CenterCrop(32x32)"),
            (["--augment=none", "--eval-crop=0.875"], lambda im: center(im, 0.875),
             "evaluation transform: Resize(36) + CenterCrop(32x32)"),
            (["--augment=flip", "--eval-crop=0.5"], lambda im: center(im, 0.5),
             "evaluation transform: Resize(64) + CenterCrop(32x32)")):
        r = run([IMAGES, "dump", f"--data=folder:{folder}", "--shape=1,3,32,32", "--split=eval",
                 "--mean=0", "--std=1", *flags, "-o", out])
        assert note in r.stdout, f"{flags}: {r.stdout}"
        got = np.fromfile(out, np.float32).reshape(len(sizes), 3, 32, 32)
        for k, im in enumerate(images):
            err = float(np.max(np.abs(got[k] * 255 - want(im))))
            # Pillow rounds to bytes between its two passes; the loader keeps floats.
            assert err <= 1.51, f"{flags}: a {im.size} image off Pillow by {err} levels"
    # The trainer names its transforms in its first lines, and checks the flag.
    for flags, train, evaluation in (
            (["--augment=none"], "Resize(32x32)", "Resize(32x32)"),
            ([], "RandomResizedCrop(32x32) + RandomHorizontalFlip",
             "Resize(36) + CenterCrop(32x32)"),
            (["--augment=flip", "--eval-crop=0.875"], "Resize(32x32) + RandomHorizontalFlip",
             "Resize(36) + CenterCrop(32x32)")):
        r = run([LENET, f"--data=folder:{DATA}", "--steps=1", "--eval", "--progress=off",
                 *flags])
        lines = r.stdout.splitlines()[:8]
        assert any(f"data: training transform: {train}" in x for x in lines) and \
            any(f"data: evaluation transform: {evaluation}" in x for x in lines), \
            f"{flags}: {r.stdout[:1500]}"
    for bad in ("--eval-crop=0", "--eval-crop=1.5", "--eval-crop=x"):
        r = run([LENET, f"--data=folder:{DATA}", "--steps=1", bad], expect=2)
        assert "--eval-crop" in r.stderr, r.stderr
    r = run([LENET, "--data=synthetic", "--eval-crop=0.875"], expect=2)
    assert "apply to --data=folder:DIR" in r.stderr, r.stderr


def write_cifar(folder, files, records, seed):
    """CIFAR-10 binary files: `records` random images each; their labels and pixels."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    labels, pixels = [], []
    for name in files:
        lab = rng.integers(0, 10, records, dtype=np.uint8)
        pix = rng.integers(0, 256, (records, 3, 32, 32), dtype=np.uint8)
        with open(os.path.join(folder, name), "wb") as f:
            for k in range(records):
                f.write(bytes([lab[k]]) + pix[k].tobytes())
        labels.append(lab)
        pixels.append(pix)
    return np.concatenate(labels), np.concatenate(pixels)


def cifar10():
    root = os.path.join(TMP, "cifar")
    folder = os.path.join(root, "cifar-10-batches-bin")  # found from its parent too
    labels, pixels = write_cifar(folder, [f"data_batch_{k}.bin" for k in range(1, 6)], 40, 1)
    test_labels, test_pixels = write_cifar(folder, ["test_batch.bin"], 32, 2)
    got, got_labels = dump(f"cifar10:{root}", (1, 3, 32, 32), "--augment=none", "--mean=0",
                           "--std=1")
    assert got.shape[0] == 200 and list(got_labels) == list(labels), "training labels"
    assert np.max(np.abs(got * 255 - pixels)) < 1e-3, "training pixels"
    got, got_labels = dump(f"cifar10:{folder}", (1, 3, 32, 32), "--augment=none", "--mean=0",
                           "--std=1", split="val")
    assert list(got_labels) == list(test_labels), "test labels"
    assert np.max(np.abs(got * 255 - test_pixels)) < 1e-3, "test pixels"
    gray, _ = dump(f"cifar10:{folder}", (1, 1, 32, 32), "--augment=none", "--mean=0", "--std=1")
    p = pixels.astype(np.uint32)
    luma = (p[:, 0] * 19595 + p[:, 1] * 38470 + p[:, 2] * 7471 + 0x8000) >> 16
    assert np.max(np.abs(gray[:, 0] * 255 - luma)) < 1e-3, "luma of CIFAR-10"
    # A trainer on it: top-1 and top-5 from the eval pass, which the test
    # recomputes from the dumped logits (the test split is one batch).
    exe = LENET10
    log, dumped = os.path.join(TMP, "cifar.jsonl"), os.path.join(TMP, "cifar-dump")
    r = run([exe, f"--data=cifar10:{root}", "--epochs=2", "--eval", f"--log={log}",
             f"--dump={dumped}", "--progress=lines"])
    assert "CIFAR-10, 10 classes, 200 training images, 32 test images" in r.stdout, r.stdout
    ev = [json.loads(x) for x in open(log) if '"eval"' in x][-1]
    logits = np.fromfile(os.path.join(dumped, "eval_logits.bin"), np.float32).reshape(32, 10)
    rank = np.array([np.sum(logits[k] > logits[k, y]) + np.sum(logits[k, :y] == logits[k, y])
                     for k, y in enumerate(test_labels)])
    assert abs(ev["accuracy"] - np.mean(rank == 0)) < 1e-9, (ev, rank)
    assert abs(ev["top5"] - np.mean(rank < 5)) < 1e-9, (ev, rank)
    assert "top-5" in r.stdout, r.stdout
    # A truncated file names itself.
    with open(os.path.join(folder, "data_batch_3.bin"), "r+b") as f:
        f.truncate(3073 * 7 + 100)
    r = run([exe, f"--data=cifar10:{root}", "--steps=1"], expect=1)
    assert "data_batch_3.bin" in r.stderr and "3073-byte records" in r.stderr, r.stderr


def learns(name, exe, epochs, floor, *flags):
    log = os.path.join(TMP, name + ".jsonl")
    r = run([exe, f"--data=folder:{DATA}", f"--epochs={epochs}", "--eval", f"--log={log}",
             "--progress=lines", *flags])
    assert "train: 4 classes, 240 images" in r.stdout and "val: 4 classes, 60 images" in r.stdout, \
        r.stdout
    evals = [json.loads(x) for x in open(log) if '"eval"' in x]
    assert len(evals) == epochs and all("top5" in e for e in evals), evals
    assert re.search(r"eval  epoch \d+  accuracy [0-9.]+ \(\d+/60\)  top-5 1\.0000", r.stdout), \
        r.stdout
    best = max(e["accuracy"] for e in evals)
    print(f"  {name}: validation accuracy by epoch "
          f"{' '.join(format(e['accuracy'], '.2f') for e in evals)} (chance 0.25)")
    assert evals[-1]["accuracy"] >= floor, f"final accuracy {evals[-1]['accuracy']} (best {best})"


def lenet_learns():
    learns("lenet", LENET, 10, 0.65, "--lr=0.02")


def alexnet_learns():
    exe = build_trainer("alexnet", "alexnet", "--size", "64", "--width", "0.25", "--classes", "4",
                        "--batch", "32", lr=0.001)
    learns("alexnet", exe, 10, 0.55)


def threads_same_bytes():
    base = [f"--data=folder:{DATA}", "--steps=12", "--seed=4", "--progress=off"]
    one, four = os.path.join(TMP, "threads1"), os.path.join(TMP, "threads4")
    run([LENET, *base, "--data-threads=1", "--prefetch=1", f"--dump={one}"])
    run([LENET, *base, "--data-threads=4", "--prefetch=6", f"--dump={four}"])
    a, b = read_params(one), read_params(four)
    assert a and a == b, "1 and 4 loader threads trained different weights"
    other = os.path.join(TMP, "threads_seed")
    run([LENET, *base[:-2], "--seed=5", "--progress=off", f"--dump={other}"])
    assert read_params(other) != a, "--seed changed nothing"


def kill_and_resume():
    common = [f"--data=folder:{DATA}", "--epochs=6", "--seed=7", "--augment=standard",
              "--progress=off"]
    full, part, ck = (os.path.join(TMP, d) for d in ("res_full", "res_part", "res_ck"))
    run([LENET, *common, f"--dump={full}"])
    saved = harness.kill_at_first_checkpoint(
        [LENET, *common, f"--checkpoint-dir={ck}", "--checkpoint-every=5"], ck, 120)
    assert saved and "ckpt-42.lwckpt" not in saved, f"checkpoints at the kill: {saved}"
    r = run([LENET, *common, f"--checkpoint-dir={ck}", "--resume", f"--dump={part}"])
    assert "from step 0," not in r.stdout, "did not resume"
    a, b = read_params(full), read_params(part)
    print(f"  killed with {saved[-1]} on disk; resumed to step 42: "
          f"{sum(a[k] == b.get(k) for k in a)}/{len(a)} params bit-identical")
    assert a and a == b, "a resumed run differs from an uninterrupted one"


def bad_inputs():
    def copy_data(name):
        dst = os.path.join(TMP, name)
        shutil.copytree(DATA, dst, symlinks=True)
        return dst

    def train(folder, *flags, expect=0):
        return run([LENET, f"--data=folder:{folder}", "--steps=2", "--progress=off", *flags],
                   expect=expect)

    jpeg = os.path.join(DATA, "train", "a_circle", "000.jpg")
    png = os.path.join(DATA, "train", "b_square", "011.png")
    jpeg_bytes, png_bytes = open(jpeg, "rb").read(), open(png, "rb").read()
    sos = jpeg_bytes.index(b"\xff\xda")
    mid = sos + (len(jpeg_bytes) - sos) // 3
    bad = {  # file name -> (bytes, what the message says)
        "trunc.jpg": (jpeg_bytes[:len(jpeg_bytes) // 2], "truncated"),
        "trunc.png": (png_bytes[:len(png_bytes) * 2 // 3], "truncated"),
        "header.jpg": (jpeg_bytes[:2] + b"\xff\xc0\x00\x04\x01\x02" + jpeg_bytes[2:], "JPEG"),
        "header.png": (png_bytes[:16] + b"\x00" * 8 + png_bytes[24:], "PNG"),
        "empty.png": (b"", "empty file"),
        "text.jpg": (b"this is not an image\n" * 10, "not a JPEG or PNG image"),
        "anim.png": (b"GIF89a" + b"\x00" * 40, "a GIF image"),
        # Entropy-coded data garbled: the start and end look whole, so
        # only decoding finds it.
        "entropy.jpg": (jpeg_bytes[:mid] + b"\xff\xd3" * 16 + jpeg_bytes[mid + 32:], "JPEG"),
    }
    for name, (data, text) in bad.items():
        folder = copy_data("bad_" + name.replace(".", "_"))
        # Garbled entropy data passes the start-up check: it goes to the
        # validation split, which an evaluation decodes whole.
        late = name == "entropy.jpg"
        path = os.path.join(folder, "val" if late else "train", "c_triangle", name)
        open(path, "wb").write(data)
        r = train(folder, "--eval", expect=1)
        assert path in r.stderr and text in r.stderr, f"{name}: {r.stderr}"
        assert "--skip-bad-images" in r.stderr, r.stderr
        r = train(folder, "--eval", "--skip-bad-images")
        warnings = [x for x in r.stderr.splitlines() if "warning" in x]
        assert len(warnings) == 1 and path in r.stderr, f"{name}: {r.stderr}"
        if late:
            assert "found while decoding" in r.stderr, r.stderr
        else:
            assert "skipping 1 bad image" in r.stderr and "240 images" in r.stdout, r.stderr
        shutil.rmtree(folder)
    # Several bad files: one warning naming each, and their count.
    folder = copy_data("bad_many")
    for name in ("trunc.jpg", "empty.png", "text.jpg"):
        open(os.path.join(folder, "train", "d_cross", name), "wb").write(bad[name][0])
    os.makedirs(os.path.join(folder, "train", "d_cross", "nested"))  # walked: empty is fine
    r = train(folder, "--skip-bad-images")
    assert "skipping 3 bad images" in r.stderr and r.stderr.count("warning") == 1, r.stderr
    assert all(n in r.stderr for n in ("trunc.jpg", "empty.png", "text.jpg")), r.stderr
    # An empty class folder; an unreadable one (a symbolic-link loop: the
    # tests run as root, whom permissions do not stop).
    folder = copy_data("bad_folders")
    os.makedirs(os.path.join(folder, "train", "e_empty"))
    r = train(folder, expect=1)
    assert "e_empty holds no .jpg, .jpeg or .png image" in r.stderr, r.stderr
    r = train(folder, "--skip-bad-images", expect=1)  # the class stays: 5 classes, 4 logits
    assert "has 5 classes, but the model's output has 4 logits" in r.stderr, r.stderr
    r = run([LENET10, f"--data=folder:{folder}", "--steps=2", "--skip-bad-images"])
    assert "e_empty" in r.stderr and "5 classes, 240 images" in r.stdout, r.stdout + r.stderr
    assert "10 logits for 5 classes" in r.stdout, r.stdout
    shutil.rmtree(os.path.join(folder, "train", "e_empty"))
    os.symlink("loop", os.path.join(folder, "train", "loop"))
    r = train(folder, expect=1)
    assert os.path.join(folder, "train", "loop") in r.stderr and "symbolic links" in r.stderr, \
        r.stderr
    os.remove(os.path.join(folder, "train", "loop"))
    if os.geteuid() != 0:
        locked = os.path.join(folder, "train", "b_square")
        os.chmod(locked, 0)
        r = train(folder, expect=1)
        os.chmod(locked, 0o755)
        assert locked in r.stderr and "Permission denied" in r.stderr, r.stderr
    # The validation split: a class the training split lacks, or none at all.
    os.makedirs(os.path.join(folder, "val", "z_other"))
    shutil.copy(jpeg, os.path.join(folder, "val", "z_other"))
    r = train(folder, "--eval", expect=1)
    assert "val/z_other: a class the training split does not have" in r.stderr, r.stderr
    shutil.rmtree(os.path.join(folder, "val"))
    r = train(folder, "--eval", expect=1)
    assert os.path.join(folder, "val") in r.stderr, r.stderr
    # Too few logits for the classes; a missing folder; too few images.
    small = build_trainer("lenet3", "lenet", "--batch", "32", "--size", "32", "--channels", "3",
                          "--classes", "3")
    r = run([small, f"--data=folder:{DATA}", "--steps=1"], expect=1)
    assert "4 classes, but the model's output has 3 logits" in r.stderr, r.stderr
    r = train(os.path.join(TMP, "nonexistent"), expect=1)
    assert "nonexistent/train" in r.stderr, r.stderr
    r = run([LENET, f"--data=folder:{DATA}", "--train-examples=10", "--steps=1"], expect=1)
    assert "fewer than the batch size 32" in r.stderr, r.stderr
    # Bad usage.
    for flags, text in ((["--augment=mixup"], "--augment"), (["--mean=1,2"], "--mean"),
                        (["--std=0"], "--std"), (["--data=imagenet:x"], "--data"),
                        (["--data=folder:"], "names no folder")):
        r = run([LENET, f"--data=folder:{DATA}", *flags], expect=2)
        assert text in r.stderr, r.stderr
    r = run([LENET, "--data=synthetic", "--augment=flip"], expect=2)
    assert "apply to --data=folder:DIR" in r.stderr, r.stderr


def fuzz():
    r = run([IMAGES_ASAN, "fuzz", os.path.join(DATA, "train"), "--iterations=3000", "--seed=11",
             f"--work={os.path.join(TMP, 'fuzz')}"], timeout=300)
    print("  " + r.stdout.strip())
    assert "no crash" in r.stdout, r.stdout


def main():
    global TMP, DATA, LENET, LENET10
    # One OpenBLAS thread: these runs test the data, and OpenBLAS's threads
    # spinning beside the loader's on a busy 2-core machine cost more than
    # they add (AlexNet's 10 epochs: 9 s instead of 22 under load).
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    TMP = tempfile.mkdtemp(prefix="lwcc-image-data-")
    DATA = os.path.join(TMP, "shapes")
    make_folder(DATA)
    lenet = ["lenet", "--batch", "32", "--size", "32", "--channels", "3"]
    LENET = build_trainer("lenet", *lenet, "--classes", "4")
    LENET10 = build_trainer("lenet10", *lenet, "--classes", "10")
    cases = (decode_formats, transforms_match_pillow, eval_transform_follows_training, cifar10,
             lenet_learns, alexnet_learns,
             threads_same_bytes, kill_and_resume, bad_inputs, fuzz)
    only = sys.argv[1:]  # names of cases to run (default all)
    for fn in cases:
        if not only or fn.__name__ in only:
            case(fn)
    shutil.rmtree(TMP, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
