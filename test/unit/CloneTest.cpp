//===- CloneTest.cpp - Graph and op cloning, locations, annotations -------===//
#include "TestUtil.h"

#include <unordered_set>

using namespace lwcc;
using namespace lwcc::test;

namespace {

using Ints = std::vector<int64_t>;

TEST(Graph, CloneIsADeepCopy) {
  const char* text = R"(graph @net(%x: f32[2,4,8,8] @data, %y: i64[2] @label) {
  %w = param "conv.weight" : f32[4,4,3,3]
  %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,8,8] @par(n = 2, devices = [0, 1]) @dev(0) loc("conv1")
  %a, %b = split(%c) {axis = 1, split = [1, 3]} : f32[2,1,8,8], f32[2,3,8,8]
  %r = relu(%b) : f32[2,3,8,8] @buf(64)
  return %a, %r, %x
}
)";
  auto g = parseOk(text, "net.lwir");
  ASSERT_TRUE(g);
  std::string original = printGraph(*g);
  auto c = g->clone();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name(), "net");
  EXPECT_EQ(printGraph(*c), original);
  EXPECT_EQ(errorText(verifyGraph(*c)), "");

  // Locations and annotations are copied.
  auto gOps = opList(*g), cOps = opList(*c);
  ASSERT_EQ(gOps.size(), cOps.size());
  for (size_t i = 0; i < gOps.size(); ++i) {
    EXPECT_NE(gOps[i], cOps[i]);
    EXPECT_EQ(cOps[i]->loc().str(), gOps[i]->loc().str());
    EXPECT_EQ(cOps[i]->loc().name, gOps[i]->loc().name);
    EXPECT_EQ(cOps[i]->annotations(), gOps[i]->annotations());
  }
  EXPECT_EQ(c->input(1)->role(), InputRole::Label);
  EXPECT_EQ(c->input(0)->loc().str(), g->input(0)->loc().str());
  EXPECT_EQ(c->param(0)->paramName(), "conv.weight");

  // Every use in the clone points into the clone.
  std::unordered_set<const Value*> originalValues;
  for (const auto& v : g->inputs())
    originalValues.insert(v.get());
  for (const auto& v : g->params())
    originalValues.insert(v.get());
  for (Op* op : gOps)
    for (unsigned i = 0; i < op->numResults(); ++i)
      originalValues.insert(op->result(i));
  auto checkUses = [&](const Value* v) {
    for (const Use& u : v->uses()) {
      if (u.user) {
        EXPECT_EQ(u.user->parent(), c.get());
        EXPECT_EQ(u.user->operand(u.index), v);
      } else {
        EXPECT_EQ(c->outputs()[u.index], v);
      }
    }
  };
  for (const auto& v : c->inputs())
    checkUses(v.get());
  for (const auto& v : c->params())
    checkUses(v.get());
  for (Op* op : cOps) {
    EXPECT_EQ(op->parent(), c.get());
    for (Value* v : op->operands())
      EXPECT_EQ(originalValues.count(v), 0u);
    for (unsigned i = 0; i < op->numResults(); ++i)
      checkUses(op->result(i));
  }
  for (Value* v : c->outputs())
    EXPECT_EQ(originalValues.count(v), 0u);
  EXPECT_EQ(c->input(0)->uses().size(), 2u); // conv operand and output #2

  // Mutating the clone leaves the original alone.
  cOps[0]->setAttr("strides", Attribute(Ints{2, 2}));
  cOps[0]->annotations().device = 1;
  cOps[2]->result()->replaceAllUsesWith(cOps[1]->result(1));
  c->eraseOp(cOps[2]);
  c->input(0)->setName("renamed");
  c->setName("other");
  EXPECT_NE(printGraph(*c), original);
  EXPECT_EQ(printGraph(*g), original);
  EXPECT_EQ(g->numOps(), 3u);
  EXPECT_EQ(gOps[2]->result()->uses(), (std::vector<Use>{{nullptr, 1}}));
}

TEST(Builder, CloneWithValueMap) {
  Graph src("src");
  Value* x = src.addInput("x", f32({2}));
  Op* r = src.createOp(OpKind::Relu, {x}, {f32({2})}, Location{"", 0, 0, "r"});
  r->result()->setName("r");
  Op* add = src.createOp(OpKind::Add, {r->result(), x}, {f32({2})});
  add->annotations().device = 3;

  Graph dst("dst");
  Value* y = dst.addInput("y", f32({2}));
  std::unordered_map<const Value*, Value*> map{{x, y}};
  Builder b(dst);
  Op* r2 = b.clone(*r, map);
  Op* add2 = b.clone(*add, map);

  EXPECT_EQ(r2->parent(), &dst);
  EXPECT_EQ(r2->operand(0), y);
  EXPECT_EQ(r2->loc().name, "r");
  EXPECT_EQ(r2->result()->name(), "r");
  EXPECT_EQ(map.at(r->result()), r2->result());
  EXPECT_EQ(map.at(add->result()), add2->result());
  EXPECT_EQ(add2->operand(0), r2->result());
  EXPECT_EQ(add2->operand(1), y);
  EXPECT_EQ(add2->annotations().device, std::optional<int64_t>(3));
  EXPECT_EQ(y->uses(), (std::vector<Use>{{r2, 0}, {add2, 1}}));
  EXPECT_EQ(x->uses(), (std::vector<Use>{{r, 0}, {add, 1}})); // the source is untouched

  // Unmapped operands stay as they are; the clone goes to the insertion point.
  std::unordered_map<const Value*, Value*> empty;
  Builder sb(src);
  sb.setInsertionPointBefore(add);
  Op* r3 = sb.clone(*r, empty);
  EXPECT_EQ(r3->operand(0), x);
  EXPECT_EQ(opList(src), (std::vector<Op*>{r, r3, add}));
  EXPECT_EQ(x->uses(), (std::vector<Use>{{r, 0}, {add, 1}, {r3, 0}}));
  EXPECT_EQ(empty.at(r->result()), r3->result());
}

TEST(Location, Str) {
  Location none;
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.hasFilePos());
  EXPECT_EQ(none.str(), "<unknown>");

  Location pos{"a.lwir", 3, 7, ""};
  EXPECT_TRUE(pos.hasFilePos());
  EXPECT_FALSE(pos.empty());
  EXPECT_EQ(pos.str(), "a.lwir:3:7");

  Location both{"a.lwir", 3, 7, "conv1"};
  EXPECT_EQ(both.str(), "a.lwir:3:7");

  Location named{"", 0, 0, "conv1"};
  EXPECT_FALSE(named.hasFilePos());
  EXPECT_FALSE(named.empty());
  EXPECT_EQ(named.str(), "loc(\"conv1\")");

  // A file without a line is no file position, but still names the file.
  Location noLine{"a.lwir", 0, 0, "n"};
  EXPECT_FALSE(noLine.hasFilePos());
  EXPECT_FALSE(noLine.empty());
  EXPECT_EQ(noLine.str(), "a.lwir");
  Location fileOnly{"a.lwir", 0, 0, ""};
  EXPECT_FALSE(fileOnly.empty());
  EXPECT_EQ(fileOnly.str(), "a.lwir");

  EXPECT_EQ(errorText(makeError(pos, "boom")), "a.lwir:3:7: boom");
  EXPECT_EQ(errorText(makeError(none, "boom")), "<unknown>: boom");
  EXPECT_EQ(errorText(makeError("plain")), "plain");
}

TEST(Annotations, EqualityAndTotalDegree) {
  ParallelConfig p{{{"n", 2}, {"c", 4}}, {0, 1, 2, 3, 4, 5, 6, 7}, {}};
  EXPECT_EQ(p.totalDegree(), 8);
  EXPECT_EQ(ParallelConfig{}.totalDegree(), 1);
  EXPECT_EQ((ParallelConfig{{{"d0", 3}}, {}, {}}).totalDegree(), 3);

  ParallelConfig q = p;
  EXPECT_EQ(p, q);
  q.devices.back() = 9;
  EXPECT_NE(p, q);
  ParallelConfig swapped{{{"c", 4}, {"n", 2}}, p.devices, {}};
  EXPECT_NE(p, swapped); // the order of the degrees is significant
  EXPECT_EQ(swapped.totalDegree(), 8);
  ParallelConfig sized{{{"n", 2}}, {0, 1}, {3, 5}};
  ParallelConfig resized = sized;
  EXPECT_EQ(sized, resized);
  resized.sizes = {4, 4};
  EXPECT_NE(sized, resized); // explicit pieces are part of the config

  Annotations a;
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a, Annotations{});
  Annotations b;
  b.device = 0;
  EXPECT_FALSE(b.empty());
  EXPECT_NE(a, b);
  a.device = 0;
  EXPECT_EQ(a, b);
  a.par = p;
  b.par = q;
  EXPECT_NE(a, b);
  b.par = p;
  EXPECT_EQ(a, b);
  b.bufferOffsets = std::vector<int64_t>{};
  EXPECT_FALSE(b.empty());
  EXPECT_NE(a, b);
  Annotations mb;
  mb.microBatch = 0;
  EXPECT_FALSE(mb.empty());
  Annotations stream;
  stream.stream = 0;
  EXPECT_FALSE(stream.empty());
}

TEST(Annotations, PrintedForm) {
  Annotations a;
  EXPECT_EQ(annotationsStr(a), "");
  a.par = ParallelConfig{{{"n", 2}, {"c", 2}}, {0, 1, 2, 3}, {}};
  a.device = 1;
  a.stream = 0;
  a.microBatch = 3;
  a.bufferOffsets = std::vector<int64_t>{0, 64};
  EXPECT_EQ(annotationsStr(a),
            "@par(n = 2, c = 2, devices = [0, 1, 2, 3]) @dev(1) @stream(0) @mb(3) @buf(0, 64)");
  Annotations devicesOnly;
  devicesOnly.par = ParallelConfig{{}, {4}, {}};
  EXPECT_EQ(annotationsStr(devicesOnly), "@par(devices = [4])");
  Annotations sized;
  sized.par = ParallelConfig{{{"n", 3}}, {0, 2, 3}, {4, 1, 3}};
  EXPECT_EQ(annotationsStr(sized), "@par(n = 3, devices = [0, 2, 3], sizes = [4, 1, 3])");
  devicesOnly.par = ParallelConfig{};
  EXPECT_EQ(annotationsStr(devicesOnly), "@par()");
}

} // namespace
