#!/usr/bin/env python3
"""Builds the ONNX models of the frontend lit tests (no binary files in the tree).

    gen_model.py CASE OUT     writes model CASE to the file OUT (and, for the
                              external-data cases, its data files next to it)
    gen_model.py --list       lists the cases
    gen_model.py --compare OUTDIR REFDIR
                              compares lwcc's output_K.pb in OUTDIR with the
                              numpy results the case wrote to REFDIR

Most cases build a well-formed model and then break one thing, so that the
test checks the message for exactly that. Nodes have names here (the ONNX
text parser of libonnx 1.12 cannot name them), so messages can be checked
for the node name.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CASES = {}


def case(fn):
    CASES[fn.__name__.replace("_", "-")] = fn
    return fn


def model(nodes, inputs, outputs, inits=(), opset=13, name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def save(m, out):
    with open(out, "wb") as f:
        f.write(m.SerializeToString())


def tensor(name, elem, dims, floats=None, ints=None, raw=None):
    """A TensorProto built by hand: onnx.helper.make_tensor rejects the
    inconsistent ones these tests need."""
    t = TensorProto()
    t.name = name
    t.data_type = elem
    t.dims.extend(dims)
    if floats is not None:
        t.float_data.extend(floats)
    if ints is not None:
        t.int64_data.extend(ints)
    if raw is not None:
        t.raw_data = raw
    return t


def xy_model(nodes, x=(2, 3), y=None, inits=(), opset=13):
    """The model of `nodes` from the float input x of shape `x` to the output
    y, whose value info is `y` (default: float, of x's shape)."""
    y = vi("y", list(x)) if y is None else y
    return model(nodes, [vi("x", list(x))], [y], inits, opset=opset)


def relu_model(opset=13, x=(2, 3), y=None):
    """y = Relu(x), as xy_model."""
    return xy_model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], x, y, opset=opset)


def add_model(b, name="add0", shape=(2, 3), inits=()):
    """y = x + b (the Add node `name`), as xy_model."""
    return xy_model([helper.make_node("Add", ["x", b], ["y"], name=name)], shape, inits=inits)


def add_init_model(init, shape):
    """y = x + init, with `init` a TensorProto named 'w'."""
    return add_model("w", shape=shape, inits=[init])


# --- Files that are not (whole) ONNX models ------------------------------


@case
def truncated(out):
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(4, 16), "w")
    data = add_init_model(w, [4, 16]).SerializeToString()
    # Cut inside the initializer's raw data: the length prefix promises more.
    with open(out, "wb") as f:
        f.write(data[: len(data) // 2])


@case
def not_onnx(out):
    with open(out, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n this is a picture, not an ONNX model \xff\xfe\x00")


@case
def empty(out):
    open(out, "wb").close()


@case
def no_graph(out):
    # A ModelProto that parses but holds no graph.
    m = onnx.ModelProto()
    m.ir_version = 8
    m.producer_name = "x"
    save(m, out)


# --- Model-level problems ------------------------------------------------


@case
def no_opset(out):
    m = relu_model()
    del m.opset_import[:]
    save(m, out)


@case
def only_other_domain_opset(out):
    m = relu_model()
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    save(m, out)


@case
def opset6(out):
    save(relu_model(opset=6), out)


@case
def opset24(out):
    save(relu_model(opset=24), out)


@case
def unsupported_op(out):
    save(xy_model([helper.make_node("Hardmax", ["x"], ["y"], name="hardmax0")]), out)


@case
def unsupported_domain(out):
    m = xy_model([helper.make_node("Gelu", ["x"], ["y"], name="gelu0", domain="com.microsoft")])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    save(m, out)


@case
def undefined_tensor(out):
    save(add_model("nowhere"), out)


@case
def cycle(out):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Relu", ["a"], ["y"], name="third"),
    ]
    save(xy_model(nodes), out)


@case
def self_loop(out):
    save(add_model("y", name="loop"), out)


@case
def defined_twice(out):
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="first"),
        helper.make_node("Neg", ["x"], ["t"], name="second"),
        helper.make_node("Relu", ["t"], ["y"], name="third"),
    ]
    save(xy_model(nodes), out)


@case
def node_redefines_input(out):
    save(
        model(
            [helper.make_node("Relu", ["x"], ["x"], name="shadow")],
            [vi("x", [2, 3])],
            [vi("x", [2, 3])],
        ),
        out,
    )


@case
def initializer_twice(out):
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    m = add_init_model(w, [2, 3])
    m.graph.initializer.append(w)
    save(m, out)


@case
def input_twice(out):
    m = relu_model()
    m.graph.input.append(vi("x", [2, 3]))
    save(m, out)


# --- Conv and pool attributes --------------------------------------------


def conv_model(attrs, x_shape=(1, 2, 5, 5), w_shape=(4, 2, 3, 3), y_shape=None):
    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", **attrs)
    return xy_model([conv], x_shape, vi("y", y_shape), [w])


@case
def conv_strides_length(out):
    save(conv_model({"strides": [1, 1, 1]}), out)


@case
def conv_pads_length(out):
    save(conv_model({"pads": [1, 1]}), out)


@case
def conv_dilations_length(out):
    save(conv_model({"dilations": [2]}), out)


@case
def conv_kernel_shape(out):
    save(conv_model({"kernel_shape": [2, 2]}), out)


@case
def conv_3d(out):
    save(conv_model({}, x_shape=(1, 2, 5, 5, 5), w_shape=(4, 2, 3, 3, 3)), out)


@case
def conv_weight_rank(out):
    save(conv_model({}, w_shape=(4, 2, 3)), out)


@case
def conv_auto_pad_unknown(out):
    save(conv_model({"auto_pad": "SAME"}), out)


@case
def maxpool_indices(out):
    save(
        model(
            [
                helper.make_node(
                    "MaxPool", ["x"], ["y", "idx"], name="pool0", kernel_shape=[2, 2]
                )
            ],
            [vi("x", [1, 2, 4, 4])],
            [vi("y", [1, 2, 3, 3]), vi("idx", [1, 2, 3, 3], TensorProto.INT64)],
        ),
        out,
    )


@case
def batchnorm_training(out):
    c = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "m", "v")]
    bn = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn0", training_mode=1
    )
    save(xy_model([bn], [2, 3, 4, 4], inits=c, opset=15), out)


# --- Initializer data ----------------------------------------------------


def w_model(dims, **data):
    """add_init_model of a float initializer 'w' built by hand: its `dims`
    and data (tensor()'s floats or raw), with x of shape [2, 3]."""
    return add_init_model(tensor("w", TensorProto.FLOAT, dims, **data), [2, 3])


@case
def negative_dim(out):
    save(w_model([2, -3]), out)


@case
def overflowing_dims(out):
    save(w_model([1 << 62, 1 << 62]), out)


@case
def zero_then_huge_dims(out):
    # 0 elements, but partial products (strides) of 2^62 x 2^62 still wrap.
    save(w_model([0, 1 << 62, 1 << 62]), out)


@case
def huge_dims_no_data(out):
    # 2^20 x 2^20 floats claimed, no data: must fail before allocating.
    save(w_model([1 << 20, 1 << 20]), out)


@case
def raw_data_short(out):
    save(w_model([2, 3], raw=np.ones(5, np.float32).tobytes()), out)


@case
def raw_data_long(out):
    save(w_model([2, 3], raw=np.ones(7, np.float32).tobytes()), out)


# Large raw data (at least 4096 bytes): a compile that needs no weights
# leaves it in the file (loadModelProto) and checks its size alone.
@case
def raw_data_short_large(out):
    w = tensor("w", TensorProto.FLOAT, [32, 48], raw=np.ones(32 * 48 - 1, np.float32).tobytes())
    save(add_init_model(w, [32, 48]), out)


@case
def float_data_count(out):
    save(w_model([2, 3], floats=[1.0, 2.0, 3.0, 4.0]), out)


@case
def int64_data_count(out):
    shp = tensor("shp", TensorProto.INT64, [2], ints=[6])
    reshape = helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape0")
    save(xy_model([reshape], y=vi("y", [6]), inits=[shp]), out)


@case
def unsupported_elem_type(out):
    w = helper.make_tensor("w", TensorProto.UINT8, [2, 3], [1, 2, 3, 4, 5, 6])
    save(add_init_model(w, [2, 3]), out)


# --- External data -------------------------------------------------------

EXT_W = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1.0
EXT_X = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
EXT_PAD = 16  # bytes before the tensor in the data file


def ext_model(location, offset=None, length=None, extra=()):
    w = tensor("w", TensorProto.FLOAT, [2, 3])
    w.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    entries += list(extra)
    for k, v in entries:
        e = w.external_data.add()
        e.key = k
        e.value = v
    return add_init_model(w, [2, 3])


def write_data(path):
    with open(path, "wb") as f:
        f.write(b"\xab" * EXT_PAD + EXT_W.tobytes() + b"\xcd" * 8)


@case
def ext_valid(out):
    d = os.path.dirname(os.path.abspath(out))
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    write_data(os.path.join(d, "data", "weights.bin"))
    save(ext_model("data/weights.bin", EXT_PAD, EXT_W.nbytes), out)
    write_io(out, [EXT_X], [EXT_X + EXT_W])


@case
def ext_valid_no_length(out):
    # No length: the tensor runs to the end of the file.
    d = os.path.dirname(os.path.abspath(out))
    with open(os.path.join(d, "tail.bin"), "wb") as f:
        f.write(b"\x00" * 4 + EXT_W.tobytes())
    save(ext_model("tail.bin", 4), out)
    write_io(out, [EXT_X], [EXT_X + EXT_W])


@case
def ext_absolute(out):
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(d, "weights.bin"))
    save(ext_model(os.path.join(d, "weights.bin"), EXT_PAD, EXT_W.nbytes), out)


@case
def ext_dotdot(out):
    # The (existing) file sits one level above the model's folder.
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(os.path.dirname(d), "weights.bin"))
    save(ext_model("../weights.bin", EXT_PAD, EXT_W.nbytes), out)


@case
def ext_symlink_outside(out):
    # model folder: <dir>/m; the link <dir>/m/link.bin -> <dir>/outside/secret.bin
    d = os.path.dirname(os.path.abspath(out))
    outside = os.path.join(os.path.dirname(d), "outside")
    os.makedirs(outside, exist_ok=True)
    write_data(os.path.join(outside, "secret.bin"))
    link = os.path.join(d, "link.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join(outside, "secret.bin"), link)
    save(ext_model("link.bin", EXT_PAD, EXT_W.nbytes), out)


@case
def ext_symlink_inside(out):
    # A link that stays inside the model folder is fine.
    d = os.path.dirname(os.path.abspath(out))
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    write_data(os.path.join(d, "data", "weights.bin"))
    link = os.path.join(d, "link.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join("data", "weights.bin"), link)
    save(ext_model("link.bin", EXT_PAD, EXT_W.nbytes), out)


@case
def ext_missing(out):
    save(ext_model("missing.bin", 0, EXT_W.nbytes), out)


@case
def ext_past_end(out):
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(d, "weights.bin"))  # 16 + 24 + 8 = 48 bytes
    save(ext_model("weights.bin", 40, 24), out)


@case
def ext_offset_past_end(out):
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(d, "weights.bin"))
    save(ext_model("weights.bin", 4096), out)


@case
def ext_bad_offset(out):
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(d, "weights.bin"))
    save(ext_model("weights.bin", "16abc", EXT_W.nbytes), out)


@case
def ext_negative_length(out):
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(d, "weights.bin"))
    save(ext_model("weights.bin", 0, -24), out)


@case
def ext_length_mismatch(out):
    # The range is inside the file but holds 20 bytes for a 24-byte tensor.
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(d, "weights.bin"))
    save(ext_model("weights.bin", EXT_PAD, 20), out)


@case
def ext_no_location(out):
    m = ext_model("x")
    w = m.graph.initializer[0]
    del w.external_data[:]
    save(m, out)


@case
def ext_directory(out):
    d = os.path.dirname(os.path.abspath(out))
    os.makedirs(os.path.join(d, "adir"), exist_ok=True)
    save(ext_model("adir"), out)


# --- Values needed at compile time, and graph outputs -------------------


@case
def runtime_shape(out):
    save(
        model(
            [helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape0")],
            [vi("x", [2, 3]), vi("shp", [2], TensorProto.INT64)],
            [vi("y", [3, 2])],
        ),
        out,
    )


@case
def runtime_shape_computed(out):
    # The shape is computed from a graph input: still only known at run time.
    two = numpy_helper.from_array(np.array([1, 1], np.int64), "one")
    save(
        model(
            [
                helper.make_node("Add", ["s", "one"], ["shp"], name="add0"),
                helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape0"),
            ],
            [vi("x", [2, 3]), vi("s", [2], TensorProto.INT64)],
            [vi("y", [3, 2])],
            [two],
        ),
        out,
    )


@case
def output_shape_mismatch(out):
    save(relu_model(y=vi("y", [3, 2])), out)


@case
def output_rank_mismatch(out):
    save(relu_model(y=vi("y", [2, 3, 1])), out)


@case
def output_dtype_mismatch(out):
    save(relu_model(y=vi("y", [2, 3], TensorProto.INT64)), out)


@case
def output_undefined(out):
    m = relu_model()
    m.graph.output.append(vi("z", [2, 3]))
    save(m, out)


# --- Symbolic dims ------------------------------------------------------


@case
def batch_size_dim(out):
    save(relu_model(x=["batch_size", 3]), out)


@case
def unnamed_dim(out):
    save(relu_model(x=[None, 3]), out)


# --- Attribute tensors with external data --------------------------------


@case
def constant_ext(out):
    # A Constant whose value lives in an external file next to the model.
    d = os.path.dirname(os.path.abspath(out))
    write_data(os.path.join(d, "const.bin"))
    t = tensor("c", TensorProto.FLOAT, [2, 3])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "const.bin"), ("offset", str(EXT_PAD)), ("length", "24")):
        e = t.external_data.add()
        e.key, e.value = k, v
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const0", value=t),
        helper.make_node("Add", ["x", "c"], ["y"], name="add0"),
    ]
    save(xy_model(nodes), out)


# --- Tensor encodings ----------------------------------------------------

ENC_X = np.linspace(-2.0, 2.0, 6, dtype=np.float32).reshape(2, 3)


def write_io(out, inputs, outputs):
    """Writes in/input_K.pb and ref/output_K.pb next to the model."""
    d = os.path.dirname(os.path.abspath(out))
    for sub, arrays, stem in (("in", inputs, "input"), ("ref", outputs, "output")):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        for k, a in enumerate(arrays):
            with open(os.path.join(d, sub, "%s_%d.pb" % (stem, k)), "wb") as f:
                f.write(numpy_helper.from_array(a, "%s_%d" % (stem, k)).SerializeToString())


@case
def encodings(out):
    """y = x + each initializer (cast to float), every one stored another way."""
    v = np.array([[0.5, -1.25, 2.0], [3.0, -0.125, 1024.0]])
    f16 = v.astype(np.float16)
    bf16_bits = (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    inits = [
        tensor("f32_raw", TensorProto.FLOAT, [2, 3], raw=v.astype(np.float32).tobytes()),
        tensor("f32_data", TensorProto.FLOAT, [2, 3], floats=v.astype(np.float32).ravel()),
        tensor("f64_raw", TensorProto.DOUBLE, [2, 3], raw=v.tobytes()),
        tensor("f16_raw", TensorProto.FLOAT16, [2, 3], raw=f16.tobytes()),
        tensor("bf16_raw", TensorProto.BFLOAT16, [2, 3], raw=bf16_bits.tobytes()),
        tensor("i64_raw", TensorProto.INT64, [2, 3], raw=np.array([1, -2, 3, -4, 5, -6], np.int64).tobytes()),
        tensor("i64_data", TensorProto.INT64, [2, 3], ints=[1, -2, 3, -4, 5, -6]),
        tensor("i32_raw", TensorProto.INT32, [2, 3], raw=np.array([7, -8, 9, 0, 1, 2], np.int32).tobytes()),
        tensor("bool_raw", TensorProto.BOOL, [2, 3], raw=np.array([1, 0, 1, 1, 0, 0], np.uint8).tobytes()),
    ]
    # float16 and bfloat16 in int32_data hold the bit patterns.
    t = tensor("f16_data", TensorProto.FLOAT16, [2, 3])
    t.int32_data.extend(int(b) for b in f16.view(np.uint16).ravel())
    inits.append(t)
    t = tensor("f64_data", TensorProto.DOUBLE, [2, 3])
    t.double_data.extend(v.ravel())
    inits.append(t)
    t = tensor("i32_data", TensorProto.INT32, [2, 3])
    t.int32_data.extend([7, -8, 9, 0, 1, 2])
    inits.append(t)
    t = tensor("bool_data", TensorProto.BOOL, [2, 3])
    t.int32_data.extend([1, 0, 1, 1, 0, 0])
    inits.append(t)
    nodes, acc, want = [], "x", ENC_X.astype(np.float64)
    for t in inits:
        c = t.name + "_f"
        nodes.append(helper.make_node("Cast", [t.name], [c], name="cast_" + t.name, to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Add", [acc, c], [t.name + "_sum"], name="add_" + t.name))
        acc = t.name + "_sum"
        want = want + numpy_helper.to_array(t).astype(np.float64)
    nodes.append(helper.make_node("Identity", [acc], ["y"], name="out"))
    save(xy_model(nodes, inits=inits), out)
    write_io(out, [ENC_X], [want.astype(np.float32)])


@case
def initializer_as_input(out):
    """Old exporters list initializers among the graph inputs too."""
    w = numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w")
    m = add_init_model(w, [2, 3])
    m.graph.input.append(vi("w", [2, 3]))
    save(m, out)
    write_io(out, [ENC_X], [ENC_X + 0.5])


# --- Checking reference outputs -------------------------------------------


def compare(outdir, refdir):
    """Compares lwcc's output_K.pb files in outdir with refdir's."""
    k, status = 0, 0
    while os.path.exists(os.path.join(refdir, "output_%d.pb" % k)):
        arrays = []
        for d in (outdir, refdir):
            t = onnx.TensorProto()
            with open(os.path.join(d, "output_%d.pb" % k), "rb") as f:
                t.ParseFromString(f.read())
            arrays.append(numpy_helper.to_array(t))
        got, want = arrays
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=1e-6):
            print("MISMATCH output_%d: got\n%s\nwant\n%s" % (k, got, want))
            status = 1
        else:
            print("MATCH output_%d shape=%s" % (k, list(got.shape)))
        k += 1
    if k == 0:
        print("no reference outputs in %s" % refdir)
        status = 1
    return status


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        print("\n".join(sorted(CASES)))
        return 0
    if len(argv) == 4 and argv[1] == "--compare":
        return compare(argv[2], argv[3])
    if len(argv) != 3 or argv[1] not in CASES:
        print("usage: gen_model.py CASE OUT (CASE from --list)", file=sys.stderr)
        return 2
    out = argv[2]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    CASES[argv[1]](out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
