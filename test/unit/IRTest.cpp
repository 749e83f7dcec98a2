//===- IRTest.cpp - Graph, Op, Value and Builder API ----------------------===//
#include "TestUtil.h"

using namespace lwcc;
using namespace lwcc::test;

namespace {

using Ints = std::vector<int64_t>;

TEST(Graph, AddInputAndParam) {
  Graph g("net");
  Value* x = g.addInput("x", f32({2, 3}));
  Value* y = g.addInput("y", i64({2}), InputRole::Label);
  Value* w = g.addParam("w", "fc.weight", f32({3, 4}));

  EXPECT_EQ(g.name(), "net");
  ASSERT_EQ(g.inputs().size(), 2u);
  ASSERT_EQ(g.params().size(), 1u);
  EXPECT_EQ(g.input(0), x);
  EXPECT_EQ(g.input(1), y);
  EXPECT_EQ(g.param(0), w);

  EXPECT_EQ(x->kind(), ValueKind::Input);
  EXPECT_EQ(x->role(), InputRole::Data);
  EXPECT_EQ(y->role(), InputRole::Label);
  EXPECT_EQ(roleName(y->role()), "label");
  EXPECT_EQ(x->name(), "x");
  EXPECT_EQ(x->type(), f32({2, 3}));
  EXPECT_EQ(x->definingOp(), nullptr);
  EXPECT_FALSE(x->hasUses());

  EXPECT_EQ(w->kind(), ValueKind::Param);
  EXPECT_EQ(w->name(), "w");
  EXPECT_EQ(w->paramName(), "fc.weight");
  EXPECT_EQ(w->type(), f32({3, 4}));
  EXPECT_EQ(g.numOps(), 0u);
}

TEST(Graph, CreateOpWiresOperandsAndResults) {
  Graph g;
  Value* x = g.addInput("x", f32({2, 6}));
  Location loc{"m.lwir", 3, 5, "s"};
  Op* op = g.createOp(OpKind::Split, {x}, {f32({2, 2}), f32({2, 4})}, loc);

  EXPECT_EQ(op->parent(), &g);
  EXPECT_EQ(op->kind(), OpKind::Split);
  EXPECT_EQ(op->mnemonic(), "split");
  EXPECT_EQ(&op->info(), &opInfo(OpKind::Split));
  ASSERT_EQ(op->numOperands(), 1u);
  EXPECT_EQ(op->operand(0), x);
  ASSERT_EQ(op->numResults(), 2u);
  for (unsigned i = 0; i < 2; ++i) {
    EXPECT_EQ(op->result(i)->kind(), ValueKind::Result);
    EXPECT_EQ(op->result(i)->definingOp(), op);
    EXPECT_EQ(op->result(i)->resultIndex(), i);
    EXPECT_TRUE(op->result(i)->name().empty());
  }
  EXPECT_EQ(op->result(1)->type(), f32({2, 4}));
  EXPECT_EQ(x->uses(), std::vector<Use>{(Use{op, 0})});
  EXPECT_FALSE(op->hasUsedResults());
  EXPECT_EQ(op->loc().str(), "m.lwir:3:5");
  EXPECT_EQ(op->describe(), "'split' op \"s\"");
  EXPECT_TRUE(op->attrs().empty());
  EXPECT_TRUE(op->annotations().empty());
  EXPECT_EQ(g.numOps(), 1u);
}

TEST(Op, EmitErrorIsLocatedAtTheOp) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Op* op = g.createOp(OpKind::Relu, {x}, {f32({2})}, Location{"f.lwir", 7, 2, ""});
  EXPECT_EQ(op->describe(), "'relu' op");
  ErrorParts e = inspect(op->emitError("boom"));
  ASSERT_TRUE(e.located);
  EXPECT_EQ(e.loc.line, 7u);
  EXPECT_EQ(e.text, "'relu' op: boom");
  EXPECT_EQ(e.full, "f.lwir:7:2: 'relu' op: boom");
}

TEST(Builder, CreateSetsAttributesAndLocation) {
  Graph g;
  Value* x = g.addInput("x", f32({2, 3}));
  Builder b(g);
  EXPECT_EQ(&b.graph(), &g);
  b.setLoc(Location{"", 0, 0, "flat"});
  Op* r = b.create(OpKind::Reshape, {x}, {f32({6})}, {{"shape", Attribute(Ints{6})}});
  EXPECT_EQ(r->getInts("shape"), Ints{6});
  EXPECT_EQ(r->loc().name, "flat");
  EXPECT_EQ(r->result()->type(), f32({6}));
  g.addOutput(r->result());
  EXPECT_EQ(errorText(verifyGraph(g)), "");
}

TEST(Builder, CreateInferredComputesResultTypes) {
  Graph g;
  Value* x = g.addInput("x", f32({1, 3, 8, 8}));
  Value* w = g.addParam("w", "w", f32({4, 3, 3, 3}));
  Builder b(g);
  auto conv = b.createInferred(OpKind::Conv2d, {x, w}, {{"pads", Attribute(Ints{1, 1, 1, 1})}});
  ASSERT_TRUE(!!conv) << llvm::toString(conv.takeError());
  EXPECT_EQ((*conv)->result()->type(), f32({1, 4, 8, 8}));

  auto split = b.createInferred(OpKind::Split, {(*conv)->result()},
                                {{"axis", Attribute(1)}, {"split", Attribute(Ints{1, 3})}}, 2);
  ASSERT_TRUE(!!split) << llvm::toString(split.takeError());
  ASSERT_EQ((*split)->numResults(), 2u);
  EXPECT_EQ((*split)->result(0)->type(), f32({1, 1, 8, 8}));
  EXPECT_EQ((*split)->result(1)->type(), f32({1, 3, 8, 8}));
  g.addOutput((*split)->result(1));
  EXPECT_EQ(errorText(verifyGraph(g)), "");
}

TEST(Builder, FailingShapeRuleLeavesGraphUnchanged) {
  Graph g;
  Value* x = g.addInput("x", f32({2, 3}));
  Value* y = g.addInput("y", f32({4, 3}));
  Builder b(g);
  Op* keep = b.create(OpKind::Relu, {x}, {f32({2, 3})});
  g.addOutput(keep->result());
  std::string before = printGraph(g);

  b.setLoc(Location{"", 0, 0, "bad_add"});
  auto bad = b.createInferred(OpKind::Add, {x, y});
  ASSERT_FALSE(bad);
  ErrorParts e = inspect(bad.takeError());
  EXPECT_TRUE(e.located);
  EXPECT_EQ(e.loc.name, "bad_add");
  EXPECT_NE(e.text.find("'add' op \"bad_add\""), std::string::npos) << e.text;
  EXPECT_NE(e.text.find("shapes [2,3] and [4,3] do not broadcast"), std::string::npos) << e.text;

  EXPECT_EQ(g.numOps(), 1u);
  EXPECT_EQ(x->uses(), std::vector<Use>{(Use{keep, 0})});
  EXPECT_FALSE(y->hasUses());
  EXPECT_EQ(printGraph(g), before);
}

TEST(Builder, CreateInferredChecksStructureBeforeTheShapeRule) {
  Graph g;
  Value* x = g.addInput("x", f32({2, 3}));
  Builder b(g);
  // A missing required attribute: the shape rule must not run.
  auto noShape = b.createInferred(OpKind::Reshape, {x});
  ASSERT_FALSE(noShape);
  EXPECT_NE(errorText(noShape.takeError()).find("'reshape' op: requires attribute 'shape'"),
            std::string::npos);
  // Too few operands: the shape rule would read past the operand list.
  auto oneOperand = b.createInferred(OpKind::Add, {x});
  ASSERT_FALSE(oneOperand);
  EXPECT_NE(errorText(oneOperand.takeError()).find("expects 2 operands, got 1"), std::string::npos);
  // An attribute of the wrong kind.
  auto wrongKind = b.createInferred(OpKind::Flatten, {x}, {{"axis", Attribute(Ints{1})}});
  ASSERT_FALSE(wrongKind);
  EXPECT_NE(errorText(wrongKind.takeError()).find("attribute 'axis' must be int"),
            std::string::npos);
  EXPECT_EQ(g.numOps(), 0u);
  EXPECT_FALSE(x->hasUses());
}

TEST(Value, SetOperandAndAddOperandUpdateUseLists) {
  Graph g;
  Value* a = g.addInput("a", f32({2}));
  Value* b = g.addInput("b", f32({2}));
  Op* add = g.createOp(OpKind::Add, {a, a}, {f32({2})});
  EXPECT_EQ(a->uses(), (std::vector<Use>{{add, 0}, {add, 1}}));
  EXPECT_FALSE(b->hasUses());

  add->setOperand(1, b);
  EXPECT_EQ(add->operand(1), b);
  EXPECT_EQ(a->uses(), (std::vector<Use>{{add, 0}}));
  EXPECT_EQ(b->uses(), (std::vector<Use>{{add, 1}}));

  Op* cat = g.createOp(OpKind::Concat, {b}, {f32({4})});
  cat->addOperand(a);
  ASSERT_EQ(cat->numOperands(), 2u);
  EXPECT_EQ(a->uses(), (std::vector<Use>{{add, 0}, {cat, 1}}));
  EXPECT_EQ(b->uses(), (std::vector<Use>{{add, 1}, {cat, 0}}));

  cat->dropOperands();
  EXPECT_EQ(cat->numOperands(), 0u);
  EXPECT_EQ(a->uses(), (std::vector<Use>{{add, 0}}));
  EXPECT_EQ(b->uses(), (std::vector<Use>{{add, 1}}));
  g.eraseOp(cat);
}

TEST(Value, GraphOutputsAreUses) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Op* r = g.createOp(OpKind::Relu, {x}, {f32({2})});
  g.addOutput(r->result());
  g.addOutput(x);
  EXPECT_EQ(g.outputs(), (std::vector<Value*>{r->result(), x}));
  EXPECT_EQ(r->result()->uses(), (std::vector<Use>{{nullptr, 0}}));
  EXPECT_EQ(x->uses(), (std::vector<Use>{{r, 0}, {nullptr, 1}}));
  EXPECT_TRUE(r->hasUsedResults());

  g.setOutput(0, x);
  EXPECT_FALSE(r->result()->hasUses());
  EXPECT_EQ(x->uses(), (std::vector<Use>{{r, 0}, {nullptr, 1}, {nullptr, 0}}));

  g.clearOutputs();
  EXPECT_TRUE(g.outputs().empty());
  EXPECT_EQ(x->uses(), (std::vector<Use>{{r, 0}}));
}

TEST(Value, ReplaceAllUsesWithRewritesOperandsAndOutputs) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Value* y = g.addInput("y", f32({2}));
  Op* r = g.createOp(OpKind::Relu, {x}, {f32({2})});
  Op* add = g.createOp(OpKind::Add, {r->result(), r->result()}, {f32({2})});
  g.addOutput(r->result());
  g.addOutput(add->result());

  r->result()->replaceAllUsesWith(y);
  EXPECT_FALSE(r->result()->hasUses());
  EXPECT_EQ(add->operand(0), y);
  EXPECT_EQ(add->operand(1), y);
  EXPECT_EQ(g.outputs()[0], y);
  EXPECT_EQ(g.outputs()[1], add->result());
  EXPECT_EQ(y->uses(), (std::vector<Use>{{add, 0}, {add, 1}, {nullptr, 0}}));

  // Replacing a value by itself changes nothing.
  y->replaceAllUsesWith(y);
  EXPECT_EQ(y->uses().size(), 3u);

  // The graph still verifies and the dead relu can go.
  g.eraseOp(r);
  EXPECT_EQ(errorText(verifyGraph(g)), "");
  // Later output edits see the moved use.
  g.setOutput(0, x);
  EXPECT_EQ(y->uses(), (std::vector<Use>{{add, 0}, {add, 1}}));
}

TEST(Graph, EraseOpDropsOperandUses) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Op* a = g.createOp(OpKind::Relu, {x}, {f32({2})});
  Op* b = g.createOp(OpKind::Add, {a->result(), x}, {f32({2})});
  EXPECT_EQ(x->uses().size(), 2u);
  g.eraseOp(b);
  EXPECT_EQ(g.numOps(), 1u);
  EXPECT_FALSE(a->hasUsedResults());
  EXPECT_EQ(x->uses(), (std::vector<Use>{{a, 0}}));
  g.eraseOp(a);
  EXPECT_EQ(g.numOps(), 0u);
  EXPECT_FALSE(x->hasUses());
}

TEST(Graph, EraseParam) {
  Graph g;
  Value* w1 = g.addParam("w1", "a", f32({2}));
  Value* w2 = g.addParam("w2", "b", f32({2}));
  Value* w3 = g.addParam("w3", "c", f32({2}));
  g.eraseParam(w2);
  ASSERT_EQ(g.params().size(), 2u);
  EXPECT_EQ(g.param(0), w1);
  EXPECT_EQ(g.param(1), w3);
  g.eraseParam(w1);
  ASSERT_EQ(g.params().size(), 1u);
  EXPECT_EQ(g.param(0), w3);
}

TEST(Graph, MoveOpAndNextOp) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Op* a = g.createOp(OpKind::Relu, {x}, {f32({2})});
  Op* b = g.createOp(OpKind::Tanh, {x}, {f32({2})});
  Op* c = g.createOp(OpKind::Sigmoid, {x}, {f32({2})});
  EXPECT_EQ(opList(g), (std::vector<Op*>{a, b, c}));
  EXPECT_EQ(g.nextOp(a), b);
  EXPECT_EQ(g.nextOp(b), c);
  EXPECT_EQ(g.nextOp(c), nullptr);

  g.moveOp(c, a);
  EXPECT_EQ(opList(g), (std::vector<Op*>{c, a, b}));
  EXPECT_EQ(g.nextOp(c), a);
  EXPECT_EQ(g.nextOp(b), nullptr);

  g.moveOp(c, nullptr);
  EXPECT_EQ(opList(g), (std::vector<Op*>{a, b, c}));
  g.moveOp(a, c);
  EXPECT_EQ(opList(g), (std::vector<Op*>{b, a, c}));

  // Moved ops can still be erased and used as insertion points.
  g.eraseOp(a);
  EXPECT_EQ(opList(g), (std::vector<Op*>{b, c}));
  Op* d = g.createOp(OpKind::Exp, {x}, {f32({2})}, {}, c);
  EXPECT_EQ(opList(g), (std::vector<Op*>{b, d, c}));
}

TEST(Builder, InsertionPoints) {
  Graph g;
  Value* x = g.addInput("x", f32({2}));
  Builder bld(g);
  Op* a = bld.create(OpKind::Relu, {x}, {f32({2})});
  Op* c = bld.create(OpKind::Tanh, {x}, {f32({2})});

  bld.setInsertionPointAfter(a);
  Op* b1 = bld.create(OpKind::Exp, {x}, {f32({2})});
  // The insertion point stays before c: the next op goes after b1.
  Op* b2 = bld.create(OpKind::Log, {x}, {f32({2})});
  EXPECT_EQ(opList(g), (std::vector<Op*>{a, b1, b2, c}));

  bld.setInsertionPointBefore(a);
  Op* z = bld.create(OpKind::Neg, {x}, {f32({2})});
  EXPECT_EQ(opList(g), (std::vector<Op*>{z, a, b1, b2, c}));

  // After the last op is the end of the graph.
  bld.setInsertionPointAfter(c);
  Op* e1 = bld.create(OpKind::Abs, {x}, {f32({2})});
  EXPECT_EQ(opList(g).back(), e1);

  bld.setInsertionPointBefore(z);
  bld.setInsertionPointToEnd();
  Op* e2 = bld.create(OpKind::Sqrt, {x}, {f32({2})});
  EXPECT_EQ(opList(g), (std::vector<Op*>{z, a, b1, b2, c, e1, e2}));
}

TEST(Op, AttributeDefaultsAndStoredValues) {
  Graph g;
  Value* x = g.addInput("x", f32({1, 3, 8, 8}));
  Value* w = g.addParam("w", "w", f32({4, 3, 3, 3}));
  Op* conv = g.createOp(OpKind::Conv2d, {x, w}, {f32({1, 4, 6, 6})});

  // Defaults from the op table; nothing stored.
  EXPECT_EQ(conv->getInts("strides"), (Ints{1, 1}));
  EXPECT_EQ(conv->getInts("pads"), (Ints{0, 0, 0, 0}));
  EXPECT_EQ(conv->getInt("group"), 1);
  EXPECT_FALSE(conv->hasAttr("strides"));
  EXPECT_EQ(conv->findAttr("strides"), nullptr);
  EXPECT_TRUE(conv->attrs().empty());

  conv->setAttr("pads", Attribute(Ints{1, 1, 1, 1}));
  conv->setAttr("strides", Attribute(Ints{2, 2}));
  conv->setAttr("group", Attribute(1));
  EXPECT_EQ(conv->getInts("strides"), (Ints{2, 2}));
  EXPECT_EQ(conv->getInts("pads"), (Ints{1, 1, 1, 1}));
  ASSERT_NE(conv->findAttr("strides"), nullptr);
  EXPECT_EQ(conv->findAttr("strides")->kind(), AttrKind::Ints);
  // Stored in insertion order.
  ASSERT_EQ(conv->attrs().size(), 3u);
  EXPECT_EQ(conv->attrs()[0].name, "pads");
  EXPECT_EQ(conv->attrs()[1].name, "strides");
  EXPECT_EQ(conv->attrs()[2].name, "group");

  // Setting again replaces in place.
  conv->setAttr("strides", Attribute(Ints{3, 3}));
  EXPECT_EQ(conv->attrs().size(), 3u);
  EXPECT_EQ(conv->attrs()[1].value, Attribute(Ints{3, 3}));
  EXPECT_EQ(conv->getInts("strides"), (Ints{3, 3}));

  // Removing falls back to the default; removing an absent one is a no-op.
  conv->removeAttr("strides");
  EXPECT_FALSE(conv->hasAttr("strides"));
  EXPECT_EQ(conv->getInts("strides"), (Ints{1, 1}));
  conv->removeAttr("strides");
  conv->removeAttr("no_such_attr");
  EXPECT_EQ(conv->attrs().size(), 2u);

  // Floats, strings and float lists.
  Op* lrn = g.createOp(OpKind::Lrn, {x}, {f32({1, 3, 8, 8})});
  EXPECT_DOUBLE_EQ(lrn->getFloat("alpha"), 1e-4);
  EXPECT_DOUBLE_EQ(lrn->getFloat("beta"), 0.75);
  lrn->setAttr("beta", Attribute(0.5));
  EXPECT_DOUBLE_EQ(lrn->getFloat("beta"), 0.5);
  Op* pad = g.createOp(OpKind::Pad, {x}, {f32({1, 3, 8, 8})});
  EXPECT_EQ(pad->getString("mode"), "constant");
  pad->setAttr("mode", Attribute("edge"));
  EXPECT_EQ(pad->getString("mode"), "edge");
  Op* k = g.createOp(OpKind::Constant, {}, {f32({2})});
  k->setAttr("value", Attribute(std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(k->getFloats("value"), (std::vector<double>{0.5, -1.0}));
  Op* clip = g.createOp(OpKind::Clip, {x}, {f32({1, 3, 8, 8})});
  EXPECT_EQ(clip->getFloat("min"), -std::numeric_limits<double>::infinity());
}

} // namespace
