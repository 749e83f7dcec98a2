//===- VerifierTest.cpp - Each verifier rule, on graphs built by the API --===//
#include "TestUtil.h"

using namespace lwcc;
using namespace lwcc::test;

namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

/// A graph with one input %x: f32[2,4,8,8], for single-op tests.
struct OneInput {
  Graph g{"g"};
  Value* x = g.addInput("x", f32({2, 4, 8, 8}));
  Op* op(OpKind k, std::vector<Value*> operands, std::vector<TensorType> types,
         std::vector<NamedAttr> attrs = {}, Location loc = at(5, "the_op")) {
    Op* o = g.createOp(k, operands, types, loc);
    for (NamedAttr& a : attrs)
      o->setAttr(a.name, a.value);
    g.addOutput(o->result());
    return o;
  }
};

TEST(Verifier, AcceptsAValidGraph) {
  OneInput t;
  Value* w = t.g.addParam("w", "conv.w", f32({4, 4, 3, 3}));
  Op* c =
      t.op(OpKind::Conv2d, {t.x, w}, {f32({2, 4, 8, 8})}, {{"pads", Attribute(Ints{1, 1, 1, 1})}});
  Op* s = t.op(OpKind::Split, {c->result()}, {f32({2, 1, 8, 8}), f32({2, 3, 8, 8})},
               {{"axis", Attribute(1)}, {"split", Attribute(Ints{1, 3})}});
  t.g.addOutput(s->result(1));
  EXPECT_EQ(errorText(verifyGraph(t.g)), "");
}

//===----------------------------------------------------------------------===//
// Definitions before uses
//===----------------------------------------------------------------------===//

TEST(Verifier, UseBeforeDefinitionWithCreateOpBefore) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Op* a = g.createOp(OpKind::Relu, {x}, {f32({2})}, at(3, "a"));
  a->result()->setName("a");
  // b uses a's result but is created before a.
  Op* b = g.createOp(OpKind::Tanh, {a->result()}, {f32({2})}, at(2, "b"), a);
  EXPECT_EQ(opList(g), (std::vector<Op*>{b, a}));
  g.addOutput(b->result());
  expectOpError(g, b, "operand #0 uses '%a' before its definition");
}

TEST(Verifier, UseBeforeDefinitionAfterMoveOp) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Op* a = g.createOp(OpKind::Relu, {x}, {f32({2})}, at(2));
  Op* b = g.createOp(OpKind::Add, {x, a->result()}, {f32({2})}, at(3));
  g.addOutput(b->result());
  EXPECT_EQ(errorText(verifyGraph(g)), "");
  g.moveOp(a, nullptr);
  // Unnamed values are described without a name.
  expectOpError(g, b, "operand #1 uses a value before its definition");
  g.moveOp(a, b);
  EXPECT_EQ(errorText(verifyGraph(g)), "");
}

TEST(Verifier, OperandFromAnotherGraph) {
  Graph other("other");
  Value* z = other.addInput("z", f32({2}));
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Op* add = g.createOp(OpKind::Add, {x, z}, {f32({2})}, at(4));
  g.addOutput(add->result());
  expectOpError(g, add, "operand #1 uses '%z' before its definition");
  add->setOperand(1, x);
  EXPECT_EQ(errorText(verifyGraph(g)), "");
}

//===----------------------------------------------------------------------===//
// Counts and attributes
//===----------------------------------------------------------------------===//

TEST(Verifier, OperandCounts) {
  {
    OneInput t;
    Op* o = t.op(OpKind::Add, {t.x}, {f32({2, 4, 8, 8})});
    expectOpError(t.g, o, "expects 2 operands, got 1");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Conv2d, {t.x, t.x, t.x, t.x}, {f32({2, 4, 8, 8})});
    expectOpError(t.g, o, "expects 2 to 3 operands, got 4");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Concat, {}, {f32({2})}, {{"axis", Attribute(0)}});
    expectOpError(t.g, o, "expects at least 1 operands, got 0");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Constant, {t.x}, {f32({1})}, {{"value", Attribute(Floats{1.0})}});
    expectOpError(t.g, o, "expects 0 operands, got 1");
  }
}

TEST(Verifier, ResultCounts) {
  {
    OneInput t;
    Op* o = t.op(OpKind::Relu, {t.x}, {f32({2, 4, 8, 8}), f32({2, 4, 8, 8})});
    expectOpError(t.g, o, "expects 1 results, got 2");
  }
  {
    OneInput t;
    Op* o = t.g.createOp(OpKind::Split, {t.x}, {}, at(5, "s"));
    o->setAttr("split", Attribute(Ints{}));
    expectOpError(t.g, o, "expects at least 1 results, got 0");
  }
}

TEST(Verifier, UnknownAttribute) {
  {
    OneInput t;
    Op* o = t.op(OpKind::Relu, {t.x}, {f32({2, 4, 8, 8})}, {{"alpha", Attribute(0.1)}});
    expectOpError(t.g, o, "has no attribute 'alpha' (it takes none)");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::LeakyRelu, {t.x}, {f32({2, 4, 8, 8})}, {{"beta", Attribute(0.1)}});
    expectOpError(t.g, o, "has no attribute 'beta' (it takes: alpha)");
  }
  {
    OneInput t;
    Value* w = t.g.addParam("w", "w", f32({4, 4, 1, 1}));
    Op* o =
        t.op(OpKind::Conv2d, {t.x, w}, {f32({2, 4, 8, 8})}, {{"stride", Attribute(Ints{1, 1})}});
    expectOpError(t.g, o, "has no attribute 'stride' (it takes: strides, pads, dilations, group)");
  }
}

TEST(Verifier, WrongAttributeKind) {
  {
    OneInput t;
    Value* w = t.g.addParam("w", "w", f32({4, 4, 1, 1}));
    Op* o = t.op(OpKind::Conv2d, {t.x, w}, {f32({2, 4, 8, 8})}, {{"strides", Attribute(2)}});
    expectOpError(t.g, o, "attribute 'strides' must be int list, got int 2");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::LeakyRelu, {t.x}, {f32({2, 4, 8, 8})}, {{"alpha", Attribute(1)}});
    expectOpError(t.g, o, "attribute 'alpha' must be float, got int 1");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Pad, {t.x}, {f32({2, 4, 8, 8})},
                 {{"pads", Attribute(Ints(8, 0))}, {"mode", Attribute(Ints{1})}});
    expectOpError(t.g, o, "attribute 'mode' must be string, got int list [1]");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Cast, {t.x}, {f32({2, 4, 8, 8})}, {{"to", Attribute(Floats{0.5})}});
    expectOpError(t.g, o, "attribute 'to' must be string, got float list [0.5]");
  }
}

TEST(Verifier, MissingRequiredAttribute) {
  {
    OneInput t;
    Op* o = t.op(OpKind::Reshape, {t.x}, {f32({512})});
    expectOpError(t.g, o, "requires attribute 'shape'");
  }
  {
    OneInput t;
    Op* o =
        t.op(OpKind::MaxPool2d, {t.x}, {f32({2, 4, 8, 8})}, {{"strides", Attribute(Ints{1, 1})}});
    expectOpError(t.g, o, "requires attribute 'kernel'");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Concat, {t.x, t.x}, {f32({4, 4, 8, 8})});
    expectOpError(t.g, o, "requires attribute 'axis'");
  }
  {
    // Optional attributes may be absent.
    OneInput t;
    t.op(OpKind::ReduceSum, {t.x}, {f32({1, 1, 1, 1})});
    EXPECT_EQ(errorText(verifyGraph(t.g)), "");
  }
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

TEST(Verifier, DeclaredResultTypeMustMatchTheShapeRule) {
  {
    OneInput t;
    Op* o = t.op(OpKind::Relu, {t.x}, {f32({2, 4, 8, 7})});
    expectOpError(t.g, o, "result #0 has type f32[2,4,8,7], but its operands give f32[2,4,8,8]");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Relu, {t.x}, {TensorType(DType::F64, {2, 4, 8, 8})});
    expectOpError(t.g, o, "result #0 has type f64[2,4,8,8], but its operands give f32[2,4,8,8]");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Split, {t.x}, {f32({2, 1, 8, 8}), f32({2, 2, 8, 8})},
                 {{"axis", Attribute(1)}, {"split", Attribute(Ints{1, 3})}});
    expectOpError(t.g, o, "result #1 has type f32[2,2,8,8], but its operands give f32[2,3,8,8]");
  }
  {
    OneInput t;
    Value* y = t.g.addInput("y", f32({4, 3}));
    Op* o = t.op(OpKind::Add, {t.x, y}, {f32({2, 4, 8, 8})});
    expectOpError(t.g, o, "shapes [2,4,8,8] and [4,3] do not broadcast");
  }
}

TEST(Verifier, ShapesFromAttributesMustNotOverflow) {
  {
    // 2^62 * 4 wraps to 0 elements, the count of the empty operand.
    Graph g;
    Value* x = g.addInput("x", f32({0}));
    Op* o = g.createOp(OpKind::Reshape, {x}, {f32({int64_t{1} << 62, 4})}, at(2, "r"));
    o->setAttr("shape", Attribute(Ints{int64_t{1} << 62, 4}));
    g.addOutput(o->result());
    expectOpError(g, o,
                  "attribute 'shape' gives the shape [4611686018427387904,4], which has too "
                  "many elements");
  }
  {
    Graph g;
    Value* x = g.addInput("x", f32({1}));
    Op* o = g.createOp(OpKind::Expand, {x}, {f32({1 << 30, 1 << 30})}, at(3, "e"));
    o->setAttr("shape", Attribute(Ints{1 << 30, 1 << 30}));
    g.addOutput(o->result());
    expectOpError(g, o,
                  "attribute 'shape' gives the shape [1073741824,1073741824], which has too "
                  "many elements");
    o->setAttr("shape", Attribute(Ints{1 << 24, 1 << 24}));
    o->result()->setType(f32({1 << 24, 1 << 24}));
    EXPECT_EQ(errorText(verifyGraph(g)), "");
  }
}

TEST(Verifier, ConstantVerifyHook) {
  {
    OneInput t;
    Op* o = t.op(OpKind::Constant, {}, {f32({2})}, {{"ivalue", Attribute(Ints{1, 2})}});
    expectOpError(t.g, o, "a constant of type f32[2] takes 'value', not 'ivalue'");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Constant, {}, {f32({2})});
    expectOpError(t.g, o, "requires attribute 'value'");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Constant, {}, {i64({2})}, {{"value", Attribute(Floats{1, 2})}});
    expectOpError(t.g, o, "a constant of type i64[2] takes 'ivalue', not 'value'");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Constant, {}, {f32({2})}, {{"value", Attribute(Floats{1, 2, 3})}});
    expectOpError(t.g, o, "has 3 values for 2 elements (give 1 to splat)");
  }
  {
    OneInput t;
    Op* o = t.op(OpKind::Constant, {}, {TensorType(DType::Bool, {2})},
                 {{"ivalue", Attribute(Ints{0, 2})}});
    expectOpError(t.g, o, "a bool constant holds only 0 and 1");
  }
  {
    OneInput t;
    t.op(OpKind::Constant, {}, {f32({2, 3})}, {{"value", Attribute(Floats{0.5})}}); // splat
    t.op(OpKind::Constant, {}, {i64({2})}, {{"ivalue", Attribute(Ints{-1, 7})}});
    t.op(OpKind::Constant, {}, {TensorType(DType::Bool, {2})}, {{"ivalue", Attribute(Ints{0, 1})}});
    EXPECT_EQ(errorText(verifyGraph(t.g)), "");
  }
}

TEST(Verifier, ReportsTheFirstBadOp) {
  OneInput t;
  Op* first = t.op(OpKind::Relu, {t.x}, {f32({1})}, {}, at(2, "first"));
  t.op(OpKind::Add, {t.x}, {f32({1})}, {}, at(3, "second"));
  expectOpError(t.g, first, "result #0 has type f32[1]");
}

TEST(Verifier, VerifyOpAndVerifyOpStructure) {
  OneInput t;
  Op* o = t.op(OpKind::Relu, {t.x}, {f32({1})});
  EXPECT_EQ(errorText(verifyOpStructure(*o)), "");
  EXPECT_NE(errorText(verifyOp(*o)).find("result #0 has type f32[1]"), std::string::npos);
  o->setAttr("bogus", Attribute(1));
  EXPECT_NE(errorText(verifyOpStructure(*o)).find("has no attribute 'bogus'"), std::string::npos);
  // verifyOp does not check definitions.
  Graph other;
  Value* z = other.addInput("z", f32({2}));
  Op* r = t.g.createOp(OpKind::Relu, {z}, {f32({2})});
  EXPECT_EQ(errorText(verifyOp(*r)), "");
  t.g.eraseOp(r);
}

} // namespace
