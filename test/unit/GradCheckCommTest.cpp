//===- GradCheckCommTest.cpp - Communication ops: values and gradients ----===//
//
// The communication ops on the reference interpreter: what each computes on
// known values, and each gradient rule against central finite differences
// (GradCheckCase.h), with operands on several devices and, for the rules
// that fill in zeros, results that receive no gradient.
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"
#include "interp/Interpreter.h"

#include <numeric>

using namespace lwcc;
using namespace lwcc::test;

namespace {

/// `p` distinct devices out of 0..5, in random order.
Ints randDevices(GradCase& c, int64_t p) {
  Ints all = {0, 1, 2, 3, 4, 5};
  std::shuffle(all.begin(), all.end(), c.rng());
  return Ints(all.begin(), all.begin() + p);
}

/// `p` sizes >= 1 that add up to `total` (>= p).
Ints randSizes(GradCase& c, int64_t p, int64_t total) {
  Ints sizes(p, 1);
  for (int64_t k = p; k < total; ++k)
    ++sizes[c.randInt(0, p - 1)];
  return sizes;
}

/// A collective that splits a tensor along an axis: 2 or 3 devices, a
/// shape of rank 1 to 3 and one of its axes (noted in the case).
struct Split {
  int64_t p;
  Ints devs;
  Shape s;
  int64_t axis;
};
Split splitCase(GradCase& c) {
  Split k;
  k.p = c.randInt(2, 3);
  k.devs = randDevices(c, k.p);
  k.s = c.randShape(1, 3);
  k.axis = c.randInt(0, static_cast<int64_t>(k.s.size()) - 1);
  c.noteInts("devices", k.devs).noteShape("shape", k.s).note("axis ").note(k.axis);
  return k;
}

TEST(GradCheckComm, AllReduce) {
  forSeeds(6, [](GradCase& c, int) {
    int64_t p = c.randInt(2, 3), tensors = c.randInt(1, 2);
    Ints devs = randDevices(c, p);
    std::vector<Value*> operands;
    for (int64_t t = 0; t < tensors; ++t) {
      Shape s = c.randShape(0, 3);
      for (int64_t d : devs)
        operands.push_back(c.paramOn(d, s));
    }
    c.noteInts("devices", devs).note("tensors ").note(tensors);
    auto ys = c.emitN(OpKind::AllReduce, operands, {{"devices", devs}},
                      static_cast<unsigned>(operands.size()));
    // Some results unused: their gradient counts as zeros.
    for (size_t i = 0; i < ys.size(); ++i)
      if (i == 0 || c.coin())
        c.result(ys[i]);
  });
}

TEST(GradCheckComm, AllGatherAndReduceScatter) {
  forSeeds(6, [](GradCase& c, int seed) {
    auto [p, devs, s, axis] = splitCase(c);
    if (seed % 2) {
      std::vector<Value*> shards;
      for (int64_t d : devs) {
        Shape piece = s;
        piece[axis] = c.randInt(1, 3);
        shards.push_back(c.paramOn(d, piece));
      }
      auto ys = c.emitN(OpKind::AllGather, shards, {{"devices", devs}, {"axis", axis}},
                        static_cast<unsigned>(p));
      for (size_t i = 0; i < ys.size(); ++i)
        if (i == 1 || c.coin())
          c.result(ys[i]);
    } else {
      s[axis] += p; // room for every device
      std::vector<Value*> parts;
      for (int64_t d : devs)
        parts.push_back(c.paramOn(d, s));
      Ints sizes = randSizes(c, p, s[axis]);
      c.noteInts("sizes", sizes);
      c.test(OpKind::ReduceScatter, parts, {{"devices", devs}, {"axis", axis}, {"sizes", sizes}},
             static_cast<unsigned>(p));
    }
  });
}

TEST(GradCheckComm, BroadcastReduceToAndCopy) {
  forSeeds(6, [](GradCase& c, int seed) {
    int64_t p = c.randInt(2, 3);
    Ints devs = randDevices(c, p);
    Shape s = c.randShape(0, 3);
    int64_t root = c.coin() ? devs[0] : 5; // among the devices, or not
    if (root == 5 && std::find(devs.begin(), devs.end(), 5) != devs.end())
      root = devs[0];
    c.noteInts("devices", devs).noteShape("shape", s).note("root ").note(root);
    if (seed % 3 == 0) {
      Value* x = c.paramOn(root, s);
      auto ys = c.emitN(OpKind::Broadcast, {x}, {{"src", root}, {"devices", devs}},
                        static_cast<unsigned>(p));
      for (size_t i = 0; i < ys.size(); ++i)
        if (i == 0 || c.coin())
          c.result(ys[i]);
    } else if (seed % 3 == 1) {
      std::vector<Value*> parts;
      for (int64_t d : devs)
        parts.push_back(c.paramOn(d, s));
      c.test(OpKind::ReduceTo, parts, {{"devices", devs}, {"dst", root}});
    } else {
      c.test(OpKind::DeviceCopy, {c.paramOn(devs[0], s)}, {{"src", devs[0]}, {"dst", devs[1]}});
    }
  });
}

TEST(GradCheckComm, ShardAndUnshard) {
  forSeeds(6, [](GradCase& c, int seed) {
    auto [p, devs, s, axis] = splitCase(c);
    if (seed % 2) {
      s[axis] += p; // room for every device
      Ints sizes = randSizes(c, p, s[axis]);
      c.noteInts("sizes", sizes);
      auto ys = c.emitN(OpKind::Shard, {c.paramOn(devs[1], s)},
                        {{"src", devs[1]}, {"devices", devs}, {"axis", axis}, {"sizes", sizes}},
                        static_cast<unsigned>(p));
      for (size_t i = 0; i < ys.size(); ++i)
        if (i == 0 || c.coin())
          c.result(ys[i]);
    } else {
      std::vector<Value*> shards;
      for (int64_t d : devs) {
        Shape piece = s;
        piece[axis] = c.randInt(1, 3);
        shards.push_back(c.paramOn(d, piece));
      }
      c.test(OpKind::Unshard, shards, {{"devices", devs}, {"dst", devs[0]}, {"axis", axis}});
    }
  });
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

std::vector<double> run(Graph& g, const WeightMap& w, unsigned output) {
  auto out = interpret(g, {}, w, Precision::F64);
  EXPECT_TRUE(!!out) << (out ? "" : llvm::toString(out.takeError()));
  if (!out)
    return {};
  return (*out)[output].f;
}

TEST(CommOps, ComputeWhatTheirNamesSay) {
  // a = [1, 2, 3, 4] on device 0, b = [10, 20, 30, 40] on device 1.
  Graph g;
  TensorType t4(DType::F64, {4});
  Value* a = g.addParam("a", "a", t4);
  Value* b = g.addParam("b", "b", t4);
  b->setDevice(1);
  WeightMap w;
  w["a"] = Tensor::fromFloats(t4, {1, 2, 3, 4});
  w["b"] = Tensor::fromFloats(t4, {10, 20, 30, 40});
  Builder bl(g);
  auto make = [&](OpKind k, std::vector<Value*> ops, std::vector<NamedAttr> attrs, unsigned n) {
    auto op = bl.createInferred(k, ops, std::move(attrs), n);
    EXPECT_TRUE(!!op) << (op ? "" : llvm::toString(op.takeError()));
    return *op;
  };
  Ints d01 = {0, 1};
  Op* ar = make(OpKind::AllReduce, {a, b}, {{"devices", d01}}, 2);
  Op* ag = make(OpKind::AllGather, {a, b}, {{"devices", d01}}, 2);
  Op* rs = make(OpKind::ReduceScatter, {a, b}, {{"devices", d01}, {"sizes", Ints{1, 3}}}, 2);
  Op* bc = make(OpKind::Broadcast, {b}, {{"src", 1}, {"devices", d01}}, 2);
  Op* rt = make(OpKind::ReduceTo, {a, b}, {{"devices", d01}, {"dst", 1}}, 1);
  Op* cp = make(OpKind::DeviceCopy, {b}, {{"src", 1}, {"dst", 0}}, 1);
  Op* sh = make(OpKind::Shard, {a}, {{"src", 0}, {"devices", d01}, {"sizes", Ints{3, 1}}}, 2);
  Op* un = make(OpKind::Unshard, {b, a}, {{"devices", Ints{1, 0}}, {"dst", 0}}, 1);
  for (Op* op : {ar, ag, rs, bc, sh})
    for (unsigned i = 0; i < op->numResults(); ++i)
      g.addOutput(op->result(i));
  g.addOutput(rt->result());
  g.addOutput(cp->result());
  g.addOutput(un->result());
  ASSERT_EQ(errorText(verifyGraph(g)), "");
  using V = std::vector<double>;
  // all_reduce: the sum on both devices.
  EXPECT_EQ(run(g, w, 0), (V{11, 22, 33, 44}));
  EXPECT_EQ(run(g, w, 1), (V{11, 22, 33, 44}));
  // all_gather: the concatenation in device order, on both.
  EXPECT_EQ(run(g, w, 2), (V{1, 2, 3, 4, 10, 20, 30, 40}));
  EXPECT_EQ(run(g, w, 3), (V{1, 2, 3, 4, 10, 20, 30, 40}));
  // reduce_scatter: slices of the sum.
  EXPECT_EQ(run(g, w, 4), (V{11}));
  EXPECT_EQ(run(g, w, 5), (V{22, 33, 44}));
  // broadcast: copies of b.
  EXPECT_EQ(run(g, w, 6), (V{10, 20, 30, 40}));
  EXPECT_EQ(run(g, w, 7), (V{10, 20, 30, 40}));
  // shard: a cut in sizes 3 and 1.
  EXPECT_EQ(run(g, w, 8), (V{1, 2, 3}));
  EXPECT_EQ(run(g, w, 9), (V{4}));
  EXPECT_EQ(run(g, w, 10), (V{11, 22, 33, 44}));             // reduce_to
  EXPECT_EQ(run(g, w, 11), (V{10, 20, 30, 40}));             // device_copy
  EXPECT_EQ(run(g, w, 12), (V{10, 20, 30, 40, 1, 2, 3, 4})); // unshard in operand order
  // Placement: result i of a collective lives on devices[i].
  EXPECT_EQ(valueDevice(ar->result(1)), std::optional<int64_t>(1));
  EXPECT_EQ(valueDevice(rt->result()), std::optional<int64_t>(1));
  EXPECT_EQ(valueDevice(cp->result()), std::optional<int64_t>(0));
  EXPECT_EQ(operandDevice(*un, 0), 1);
  // Bytes moved: ring all-reduce sends 2(p-1) times each tensor; a copy once.
  EXPECT_EQ(commBytes(*ar), 2 * 1 * 32);
  EXPECT_EQ(commBytes(*cp), 32);
  EXPECT_EQ(commBytes(*sh), 8);
}

TEST(CommOps, ShardParamsReadAndWriteTheirPart) {
  // A param holding rows 1..2 of a 4x2 initializer, updated by an assign:
  // the step reads its rows and writes them back into the whole tensor.
  Graph g;
  Value* p = g.addParam("p", "w", TensorType(DType::F64, {2, 2}));
  p->setShard({ShardDim{0, 1, 4}});
  p->setDevice(3);
  Builder b(g);
  b.setDevice(3);
  auto twice = b.createInferred(OpKind::Add, {p, p});
  ASSERT_TRUE(!!twice);
  Op* as = b.create(OpKind::Assign, {p, (*twice)->result()}, {});
  (void)as;
  g.addOutput((*twice)->result());
  ASSERT_EQ(errorText(verifyGraph(g)), "");
  WeightMap state;
  state["w"] = Tensor::fromFloats(TensorType(DType::F64, {4, 2}), {1, 2, 3, 4, 5, 6, 7, 8});
  auto out = runStep(g, {}, state, Precision::F64);
  ASSERT_TRUE(!!out) << llvm::toString(out.takeError());
  EXPECT_EQ((*out)[0].f, (std::vector<double>{6, 8, 10, 12}));
  EXPECT_EQ(state["w"].f, (std::vector<double>{1, 2, 6, 8, 10, 12, 7, 8}));
}

TEST(CommOps, ReplicasThatDivergeAreAnError) {
  // Two copies of one param, assigned different values: a materialization
  // bug that the interpreter reports instead of keeping either.
  Graph g;
  TensorType t(DType::F64, {2});
  Value* p0 = g.addParam("p0", "w", t);
  Value* p1 = g.addParam("p1", "w", t);
  p1->setDevice(1);
  Builder b(g);
  auto x = b.createInferred(OpKind::Neg, {p0});
  ASSERT_TRUE(!!x);
  b.create(OpKind::Assign, {p0, (*x)->result()}, {});
  b.setDevice(1);
  b.create(OpKind::Assign, {p1, p1}, {});
  g.addOutput((*x)->result());
  ASSERT_EQ(errorText(verifyGraph(g)), "");
  WeightMap state;
  state["w"] = Tensor::fromFloats(t, {1, 2});
  auto out = runStep(g, {}, state, Precision::F64);
  ASSERT_FALSE(!!out);
  EXPECT_NE(llvm::toString(out.takeError()).find("replicas of param \"w\" diverged"),
            std::string::npos);
}

} // namespace
