//===- RuntimeShapeKernelTest.cpp - Data movement vs the interpreter ----===//
//
// The kernels that move elements (copy, transpose, concat, split, slice,
// gather, expand, pad and their gradients), each on seeded random cases
// against the reference interpreter (RuntimeTensorKernelCase.h).
//
//===----------------------------------------------------------------------===//
#include "RuntimeTensorKernelCase.h"

#include <algorithm>
#include <numeric>

namespace lwcc::test {
namespace {

using namespace kcase;

//===--- Data movement -----------------------------------------------------===//

TEST(RuntimeTensorKernelTest, CopyLike) {
  auto copyFn = [](const Op&, const Views& in, const Views& out) {
    return rt::copy(in[0], out[0]);
  };
  forCases(kAll, [&](KCase& c) {
    Shape s = c.randShape(0, 4);
    int64_t n = TensorType(DType::F32, s).numElements();
    c.check(c.op(OpKind::Reshape, {c.input(s)}, {{"shape", Ints{n, 1}}}), copyFn);
    c.check(c.op(OpKind::Flatten, {c.input(s)},
                 {{"axis", c.randInt(0, static_cast<int64_t>(s.size()))}}),
            copyFn);
    c.check(c.op(OpKind::Identity, {c.input(s)}), copyFn);
    if (isFloat(c.dtype()))
      c.check(c.op(OpKind::Dropout, {c.input(s)}, {{"ratio", 0.3}}), copyFn);
  });
}

TEST(RuntimeTensorKernelTest, Transpose) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      Shape s = c.randShape(0, 5, 4);
      Ints perm(s.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937_64(c.randInt(0, 1000)));
      c.check(c.op(OpKind::Transpose, {c.input(s)}, {{"perm", perm}}),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::transpose(in[0], out[0], {op.getInts("perm")});
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, ConcatAndSplit) {
  forCases(kAll, [](KCase& c) {
    Shape s = c.randShape(1, 4);
    int64_t rank = static_cast<int64_t>(s.size()), axis = c.randInt(0, rank - 1);
    std::vector<Value*> parts;
    for (int64_t k = 0, n = c.randInt(1, 3); k < n; ++k) {
      Shape p = s;
      p[axis] = c.randInt(0, 3);
      parts.push_back(c.input(p));
    }
    c.check(c.op(OpKind::Concat, parts, {{"axis", c.spellAxis(axis, rank)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::concat(in, out[0], {op.getInt("axis")});
            });
    Ints sizes;
    for (int64_t left = s[axis]; left > 0;) {
      sizes.push_back(c.randInt(0, left));
      left -= sizes.back();
    }
    if (c.coin())
      sizes.push_back(0);
    c.check(c.op(OpKind::Split, {c.input(s)}, {{"axis", c.spellAxis(axis, rank)}, {"split", sizes}},
                 static_cast<unsigned>(sizes.size())),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::split(in[0], out, {op.getInt("axis"), op.getInts("split")});
            });
  });
}

/// Random slice attributes for shape `s`: clamped and out-of-range bounds,
/// negative steps, axes in random order and spelling.
std::vector<NamedAttr> randomSlice(KCase& c, const Shape& s) {
  int64_t rank = static_cast<int64_t>(s.size());
  Ints axes(rank), starts, ends, steps, spelled;
  std::iota(axes.begin(), axes.end(), 0);
  std::shuffle(axes.begin(), axes.end(), std::mt19937_64(c.randInt(0, 1000)));
  axes.resize(c.randInt(1, rank));
  for (int64_t a : axes) {
    int64_t d = s[a];
    starts.push_back(c.randInt(-d - 2, d + 2));
    ends.push_back(c.randInt(0, 4) == 0 ? (c.coin() ? INT64_MAX : INT64_MIN)
                                        : c.randInt(-d - 2, d + 2));
    steps.push_back((c.coin() ? 1 : -1) * c.randInt(1, 3));
    spelled.push_back(c.spellAxis(a, rank));
  }
  std::vector<NamedAttr> attrs{{"starts", starts}, {"ends", ends}};
  attrs.push_back({"axes", spelled});
  if (c.coin() || std::any_of(steps.begin(), steps.end(), [](int64_t v) { return v != 1; }))
    attrs.push_back({"steps", steps});
  return attrs;
}

TEST(RuntimeTensorKernelTest, Slice) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      Shape s = c.randShape(1, 4, 5);
      c.check(c.op(OpKind::Slice, {c.input(s)}, randomSlice(c, s)),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::slice(in[0], out[0], sliceParams(op));
              });
    }
  });
  // Without axes and steps.
  forCases(kFloats, [](KCase& c) {
    Shape s = c.randShape(2, 3, 5);
    c.check(c.op(OpKind::Slice, {c.input(s)}, {{"starts", Ints{1, -3}}, {"ends", Ints{-1, 100}}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::slice(in[0], out[0], sliceParams(op));
            });
  });
}

TEST(RuntimeTensorKernelTest, SliceGrad) {
  forCases(kFloats, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      Shape s = c.randShape(1, 4, 5);
      std::vector<NamedAttr> attrs = randomSlice(c, s);
      Op* fwd = c.op(OpKind::Slice, {c.input(s)}, attrs);
      if (!fwd)
        return;
      attrs.push_back({"input_shape", Ints(s)});
      Value* dy = c.input(fwd->result()->type().shape);
      c.check(c.op(OpKind::SliceGrad, {dy}, attrs),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::sliceGrad(in[0], out[0], sliceParams(op));
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, Gather) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 2; ++rep) {
      Shape s = c.randShape(1, 3);
      int64_t rank = static_cast<int64_t>(s.size()), axis = c.randInt(0, rank - 1), n = s[axis];
      Shape is = c.randShape(0, 2, 3);
      Ints ix(TensorType(DType::I64, is).numElements());
      for (int64_t& v : ix)
        v = c.randInt(-n, n - 1);
      DType it = c.coin() ? DType::I64 : DType::I32;
      Value* data = c.input(s);
      Value* idx = c.inputOf(Tensor::fromInts({it, is}, ix));
      auto fn = [](const Op& op, const Views& in, const Views& out) {
        return rt::gather(in[0], in[1], out[0], {op.getInt("axis")});
      };
      c.check(c.op(OpKind::Gather, {data, idx}, {{"axis", c.spellAxis(axis, rank)}}), fn);
      Value* bad = c.inputOf(Tensor::fromInts({it, {2}}, {0, c.coin() ? n : -n - 1}));
      c.expectRefused(c.op(OpKind::Gather, {data, bad}, {{"axis", axis}}), fn);
    }
  });
}

TEST(RuntimeTensorKernelTest, GatherGrad) {
  forCases(kFloats, [](KCase& c) {
    for (int rep = 0; rep < 2; ++rep) {
      Shape s = c.randShape(1, 3);
      int64_t rank = static_cast<int64_t>(s.size()), axis = c.randInt(0, rank - 1), n = s[axis];
      Shape is = c.randShape(0, 2, 4); // repeated indices sum
      Ints ix(TensorType(DType::I64, is).numElements());
      for (int64_t& v : ix)
        v = c.randInt(-n, n - 1);
      Shape dys(s.begin(), s.begin() + axis);
      dys.insert(dys.end(), is.begin(), is.end());
      dys.insert(dys.end(), s.begin() + axis + 1, s.end());
      Value* idx = c.inputOf(Tensor::fromInts({c.coin() ? DType::I64 : DType::I32, is}, ix));
      c.check(c.op(OpKind::GatherGrad, {idx, c.input(dys)},
                   {{"axis", c.spellAxis(axis, rank)}, {"input_shape", Ints(s)}}),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::gatherGrad(in[0], in[1], out[0], {op.getInt("axis")});
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, Expand) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      auto [xs, target] = broadcastPair(c);
      c.check(
          c.op(OpKind::Expand, {c.input(xs)}, {{"shape", Ints(target)}}),
          [](const Op&, const Views& in, const Views& out) { return rt::expand(in[0], out[0]); });
    }
  });
}

TEST(RuntimeTensorKernelTest, Pad) {
  const char* modes[] = {"constant", "reflect", "edge"};
  forCases(kAll, [&](KCase& c) {
    for (int m = 0; m < 3; ++m)
      for (int rep = 0; rep < 2; ++rep) {
        Shape s = c.randShape(0, 3, 4);
        int64_t rank = static_cast<int64_t>(s.size());
        Ints pads(2 * rank);
        for (int64_t k = 0; k < 2 * rank; ++k) {
          int64_t d = s[k % rank];
          pads[k] = m == 1 ? c.randInt(d > 1 ? -1 : 0, d - 1) : c.randInt(d > 1 ? -1 : 0, 3);
        }
        // (The reference would store a constant of 2 into a bool tensor as 2;
        // bool views hold 0 or 1.)
        double value = c.dtype() == DType::Bool
                           ? static_cast<double>(c.randInt(0, 1))
                           : c.randInt(-3, 3) + (isFloat(c.dtype()) ? 0.25 : 0.0);
        c.check(
            c.op(OpKind::Pad, {c.input(s)}, {{"pads", pads}, {"mode", modes[m]}, {"value", value}}),
            [](const Op& op, const Views& in, const Views& out) {
              const std::string& mode = op.getString("mode");
              rt::PadMode pm = mode == "reflect" ? rt::PadMode::Reflect
                               : mode == "edge"  ? rt::PadMode::Edge
                                                 : rt::PadMode::Constant;
              return rt::pad(in[0], out[0], {op.getInts("pads"), pm, op.getFloat("value")});
            });
      }
  });
}

} // namespace
} // namespace lwcc::test
