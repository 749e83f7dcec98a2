//===- VerifierGraphTest.cpp - Annotation and graph-level verifier rules --===//
#include "TestUtil.h"

using namespace lwcc;
using namespace lwcc::test;

namespace {

using Degrees = std::vector<std::pair<std::string, int64_t>>;
using Ints = std::vector<int64_t>;

/// One relu over %x of the given shape, annotated by the test.
struct Annotated {
  Graph g{"g"};
  Value* x;
  Op* op;
  explicit Annotated(Shape s = {2, 4, 8, 8}) {
    x = g.addInput("x", f32(s));
    op = g.createOp(OpKind::Relu, {x}, {f32(s)}, at(7, "r"));
    g.addOutput(op->result());
  }
  Annotations& ann() { return op->annotations(); }
  void par(Degrees degrees, Ints devices = {}) {
    ann().par = ParallelConfig{std::move(degrees), std::move(devices), {}};
  }
  std::string verify() { return errorText(verifyGraph(g)); }
};

TEST(VerifyAnnotations, ValidAnnotations) {
  Annotated t;
  t.par({{"n", 2}, {"c", 2}, {"h", 2}, {"w", 8}}, {});
  t.ann().device = 0;
  t.ann().stream = 1;
  t.ann().microBatch = 0;
  t.ann().bufferOffsets = Ints{128};
  EXPECT_EQ(t.verify(), "");

  // d-dims work at any rank; devices must match the total degree.
  Annotated r3({4, 6, 5});
  r3.par({{"d0", 2}, {"d2", 5}}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  r3.ann().device = 9;
  EXPECT_EQ(r3.verify(), "");

  // n and c name the dims of a rank-2 result.
  Annotated r2({4, 6});
  r2.par({{"n", 4}, {"c", 6}});
  EXPECT_EQ(r2.verify(), "");

  // An empty @par is fine.
  Annotated empty;
  empty.par({});
  EXPECT_EQ(empty.verify(), "");
}

TEST(VerifyAnnotations, UnknownParDim) {
  {
    Annotated t({4, 6});
    t.par({{"h", 2}});
    expectOpError(t.g, t.op, "@par names dim 'h', which a rank-2 result does not have");
  }
  {
    Annotated t({4, 6, 5});
    t.par({{"n", 2}}); // named dims only for rank 2 and 4
    expectOpError(t.g, t.op, "@par names dim 'n', which a rank-3 result does not have");
  }
  {
    Annotated t;
    t.par({{"d4", 2}});
    expectOpError(t.g, t.op, "@par names dim 'd4', which a rank-4 result does not have");
  }
  {
    Annotated t;
    t.par({{"x", 2}});
    expectOpError(t.g, t.op, "@par names dim 'x', which a rank-4 result does not have");
  }
  {
    Annotated t;
    t.par({{"d", 2}});
    expectOpError(t.g, t.op, "@par names dim 'd', which a rank-4 result does not have");
  }
  {
    // A dim number too large for int64 is an unknown dim, not a crash.
    Annotated t;
    t.par({{"d99999999999999999999", 2}});
    expectOpError(t.g, t.op, "@par names dim 'd99999999999999999999'");
  }
  {
    Annotated t(Shape{});
    t.par({{"d0", 1}});
    expectOpError(t.g, t.op, "@par names dim 'd0', which a rank-0 result does not have");
  }
}

TEST(VerifyAnnotations, DimSplitTwice) {
  Annotated t;
  t.par({{"n", 2}, {"d0", 2}});
  expectOpError(t.g, t.op, "@par splits dim 'd0' twice");
  Annotated u;
  u.par({{"c", 2}, {"c", 2}});
  expectOpError(u.g, u.op, "@par splits dim 'c' twice");
}

TEST(VerifyAnnotations, DegreeRange) {
  Annotated t;
  t.par({{"c", 0}});
  expectOpError(t.g, t.op, "@par degree of 'c' must be >= 1, got 0");
  Annotated u;
  u.par({{"c", 8}});
  expectOpError(u.g, u.op, "@par degree 8 of 'c' exceeds its size 4");
  Annotated v;
  v.par({{"c", 4}}); // equal to the size is fine
  EXPECT_EQ(v.verify(), "");
}

TEST(VerifyAnnotations, Devices) {
  {
    Annotated t;
    t.par({{"n", 2}}, {0, 1, 2});
    expectOpError(t.g, t.op, "@par has 3 devices for a total degree of 2");
  }
  {
    Annotated t;
    t.par({{"n", 2}, {"c", 2}}, {0, 1});
    expectOpError(t.g, t.op, "@par has 2 devices for a total degree of 4");
  }
  {
    // No degrees (a total degree of 1) on several devices: each computes
    // the whole op.
    Annotated t;
    t.par({}, {0, 1});
    EXPECT_EQ(errorText(verifyGraph(t.g)), "");
  }
  {
    Annotated t;
    t.par({{"n", 2}, {"c", 2}}, {0, 1, 1, 2});
    expectOpError(t.g, t.op, "@par lists a device twice");
  }
  {
    Annotated t;
    t.par({{"n", 2}}, {-1, 0});
    expectOpError(t.g, t.op, "@par device ids must be >= 0");
  }
}

TEST(VerifyAnnotations, DeviceAndStream) {
  {
    Annotated t;
    t.ann().device = -1;
    expectOpError(t.g, t.op, "@dev must be >= 0, got -1");
  }
  {
    Annotated t;
    t.ann().device = 0;
    t.ann().stream = -2;
    expectOpError(t.g, t.op, "@stream must be >= 0, got -2");
  }
  {
    Annotated t;
    t.ann().stream = 0;
    expectOpError(t.g, t.op, "@stream needs @dev: a stream belongs to a device");
  }
  {
    Annotated t;
    t.par({{"n", 2}}, {0, 1});
    t.ann().device = 3;
    expectOpError(t.g, t.op, "@dev(3) is not among the @par devices");
    t.ann().device = 1;
    EXPECT_EQ(t.verify(), "");
  }
  {
    // Without @par devices any device is fine.
    Annotated t;
    t.par({{"n", 2}});
    t.ann().device = 5;
    EXPECT_EQ(t.verify(), "");
  }
}

TEST(VerifyAnnotations, MicroBatchAndBuffers) {
  {
    Annotated t;
    t.ann().microBatch = -1;
    expectOpError(t.g, t.op, "@mb must be >= 0, got -1");
  }
  {
    Annotated t;
    t.ann().bufferOffsets = Ints{0, 64};
    expectOpError(t.g, t.op, "@buf has 2 offsets for 1 results");
  }
  {
    Annotated t;
    t.ann().bufferOffsets = Ints{-64};
    expectOpError(t.g, t.op, "@buf offsets must be >= 0, got -64");
  }
  {
    Graph g;
    Value* x = g.addInput("x", f32({4}));
    Op* s = g.createOp(OpKind::Split, {x}, {f32({2}), f32({2})}, at(4, "s"));
    s->setAttr("split", Attribute(Ints{2, 2}));
    g.addOutput(s->result(0));
    s->annotations().bufferOffsets = Ints{0};
    expectOpError(g, s, "@buf has 1 offsets for 2 results");
    s->annotations().bufferOffsets = Ints{0, 8};
    EXPECT_EQ(errorText(verifyGraph(g)), "");
  }
}

TEST(VerifyAnnotations, ParOnAnOpWithoutResults) {
  // Only ops kept for their effect (assign) have no results.
  std::optional<OpKind> assign = lookupOpKind("assign");
  if (!assign || opInfo(*assign).numResults != 0)
    GTEST_SKIP() << "no op without results in the table";
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Value* p = g.addParam("p", "p", f32({2}));
  Op* a = g.createOp(*assign, {p, x}, {}, at(6, "a"));
  ASSERT_EQ(errorText(verifyGraph(g)), "");
  a->annotations().par = ParallelConfig{};
  expectOpError(g, a, "@par on an op without results");
  a->annotations().par.reset();
  a->annotations().bufferOffsets = Ints{0};
  expectOpError(g, a, "@buf has 1 offsets for 0 results");
}

//===----------------------------------------------------------------------===//
// Inputs, params, names and outputs
//===----------------------------------------------------------------------===//

TEST(VerifyGraph, LabelRoleDType) {
  // Labels hold class indices (integers) or regression targets (floats).
  Graph g;
  g.addInput("x", f32({4, 3}));
  Value* y = g.addInput("y", i64({4}), InputRole::Label);
  y->setLoc(at(1));
  EXPECT_EQ(errorText(verifyGraph(g)), "");
  y->setType(TensorType(DType::I32, {4}));
  EXPECT_EQ(errorText(verifyGraph(g)), "");
  y->setType(f32({4, 3}));
  EXPECT_EQ(errorText(verifyGraph(g)), "");
  y->setType(TensorType(DType::Bool, {4}));
  ErrorParts e = inspect(verifyGraph(g));
  ASSERT_TRUE(e.located) << e.full;
  EXPECT_EQ(e.loc.str(), "v.lwir:1:3");
  EXPECT_EQ(e.text.rfind("label input '%y' must ", 0), 0u) << e.text;
  EXPECT_NE(e.text.find("got bool[4]"), std::string::npos) << e.text;
  // Data inputs may have any element type.
  y->setRole(InputRole::Data);
  EXPECT_EQ(errorText(verifyGraph(g)), "");
}

TEST(VerifyGraph, DuplicateInitializer) {
  Graph g;
  g.addParam("w1", "fc.weight", f32({2}));
  Value* w2 = g.addParam("w2", "fc.weight", f32({2}));
  w2->setLoc(at(3));
  expectValueError(g, w2, "initializer \"fc.weight\" is bound to two params");
  w2->setParamName("fc.bias");
  EXPECT_EQ(errorText(verifyGraph(g)), "");
  Value* w3 = g.addParam("w3", "", f32({2}));
  w3->setLoc(at(4));
  expectValueError(g, w3, "param '%w3' has no initializer name");
}

TEST(VerifyGraph, DuplicateValueNames) {
  {
    Graph g;
    g.addInput("x", f32({2}));
    Value* x2 = g.addInput("x", f32({2}));
    x2->setLoc(at(1));
    expectValueError(g, x2, "input name '%x' is used twice");
  }
  {
    Graph g;
    g.addInput("x", f32({2}));
    Value* p = g.addParam("x", "init", f32({2}));
    p->setLoc(at(2));
    expectValueError(g, p, "value name '%x' is defined twice");
  }
  {
    Graph g;
    Value* x = g.addInput("x", f32({2}));
    Op* r = g.createOp(OpKind::Relu, {x}, {f32({2})}, at(3, "r"));
    r->result()->setName("x");
    g.addOutput(r->result());
    expectOpError(g, r, "value name '%x' is defined twice");
    r->result()->setName("y");
    EXPECT_EQ(errorText(verifyGraph(g)), "");
    Op* s = g.createOp(OpKind::Split, {x}, {f32({1}), f32({1})}, at(4));
    s->setAttr("split", Attribute(Ints{1, 1}));
    s->result(1)->setName("y");
    expectOpError(g, s, "value name '%y' is defined twice");
  }
  {
    // Unnamed values never clash.
    Graph g;
    Value* x = g.addInput("", f32({2}));
    Op* a = g.createOp(OpKind::Relu, {x}, {f32({2})});
    Op* b = g.createOp(OpKind::Relu, {a->result()}, {f32({2})});
    g.addOutput(b->result());
    EXPECT_EQ(errorText(verifyGraph(g)), "");
  }
}

TEST(VerifyGraph, OutputsMustBeDefinedInTheGraph) {
  Graph other("other");
  Value* z = other.addInput("z", f32({2}));
  Graph g("g");
  Value* x = g.addInput("x", f32({2}));
  g.addOutput(x);
  g.addOutput(z);
  ErrorParts e = inspect(verifyGraph(g));
  ASSERT_TRUE(e.failed);
  EXPECT_FALSE(e.located);
  EXPECT_EQ(e.full, "graph @g: output #1 is not defined in the graph");
  g.setOutput(1, x);
  EXPECT_EQ(errorText(verifyGraph(g)), "");
}

} // namespace
