// The split of initializers several nodes read (frontend/SharedInitializers.h):
// which uses get their own copy, what each copy is named, which Identity nodes
// go, and what the nodes read afterwards.
#include "frontend/SharedInitializers.h"

#include "onnx/onnx_pb.h"

#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using lwcc::TiedInitializers;

void addInit(onnx::GraphProto& g, const std::string& name, std::vector<int64_t> dims,
             int type = onnx::TensorProto::FLOAT) {
  onnx::TensorProto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t k = 0; k < n; ++k) {
    if (type == onnx::TensorProto::FLOAT)
      t->add_float_data(0.0f);
    else
      t->add_int64_data(0);
  }
}

void addNode(onnx::GraphProto& g, const std::string& op, const std::string& name,
             std::vector<std::string> inputs, std::vector<std::string> outputs) {
  onnx::NodeProto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const std::string& i : inputs)
    n->add_input(i);
  for (const std::string& o : outputs)
    n->add_output(o);
}

/// The split planned, which must be possible.
lwcc::InitializerSplit plan(const onnx::GraphProto& g, const lwcc::TiedChoice& mode) {
  auto split = lwcc::planInitializerSplit(g, mode);
  EXPECT_TRUE(static_cast<bool>(split));
  if (!split) {
    llvm::consumeError(split.takeError());
    return {};
  }
  return std::move(*split);
}

/// What each remaining node reads, by node name, after the split.
std::map<std::string, std::vector<std::string>> reads(const onnx::GraphProto& g,
                                                      const lwcc::TiedChoice& mode) {
  lwcc::InitializerSplit split = plan(g, mode);
  lwcc::RewrittenNodes nodes = lwcc::applyInitializerSplit(g, split);
  std::map<std::string, std::vector<std::string>> out;
  for (const onnx::NodeProto* n : nodes.nodes)
    out[n->name()] = std::vector<std::string>(n->input().begin(), n->input().end());
  return out;
}

std::vector<std::string> v(std::initializer_list<std::string> l) { return l; }

TEST(SharedInitializers, IdentityChainsBecomeInitializersNamedAfterTheirOutputs) {
  onnx::GraphProto g;
  addInit(g, "x", {4});
  addNode(g, "Identity", "id1", {"x"}, {"y1"});
  addNode(g, "Identity", "id2", {"y1"}, {"y2"});
  addNode(g, "Relu", "a", {"x"}, {"ra"});
  addNode(g, "Relu", "b", {"y2"}, {"rb"});
  addNode(g, "Relu", "c", {"y1"}, {"rc"});
  lwcc::InitializerSplit split = plan(g, TiedInitializers::Untie);
  ASSERT_EQ(split.copies.size(), 2u);
  EXPECT_EQ(split.copies[0].name, "y2");
  EXPECT_EQ(split.copies[1].name, "y1");
  EXPECT_EQ(split.copies[0].source, "x");
  auto r = reads(g, TiedInitializers::Untie);
  EXPECT_EQ(r.count("id1") + r.count("id2"), 0u) << "the Identity nodes stay";
  EXPECT_EQ(r["a"], v({"x"}));
  EXPECT_EQ(r["b"], v({"y2"}));
  EXPECT_EQ(r["c"], v({"y1"}));
  // One use only: nothing to split.
  onnx::GraphProto one;
  addInit(one, "x", {4});
  addNode(one, "Identity", "id", {"x"}, {"y"});
  addNode(one, "Relu", "a", {"y"}, {"r"});
  EXPECT_TRUE(plan(one, TiedInitializers::Untie).empty());
}

TEST(SharedInitializers, ANameReadTwiceKeepsItForTheFirstNode) {
  onnx::GraphProto g;
  addInit(g, "w", {4, 4});
  addNode(g, "MatMul", "m1", {"in", "w"}, {"h"});
  addNode(g, "MatMul", "m2", {"h", "w"}, {"o"});
  addNode(g, "Add", "m3", {"o", "w"}, {"p"});
  auto r = reads(g, TiedInitializers::Untie);
  EXPECT_EQ(r["m1"], v({"in", "w"}));
  EXPECT_EQ(r["m2"], v({"h", "w.1"}));
  EXPECT_EQ(r["m3"], v({"o", "w.2"}));
  // A node reading it twice is one use; keep ties everything.
  onnx::GraphProto twice;
  addInit(twice, "w", {4});
  addNode(twice, "Mul", "sq", {"w", "w"}, {"s"});
  EXPECT_TRUE(plan(twice, TiedInitializers::Untie).empty());
  EXPECT_TRUE(plan(g, TiedInitializers::Keep).empty());
}

TEST(SharedInitializers, ShapeAndTypeReadsAreNoUses) {
  // The dynamo exporter reads a weight's shape (Shape) and type (CastLike's
  // second input) beside the node that uses its values: one param still.
  onnx::GraphProto g;
  addInit(g, "w", {4, 4});
  addNode(g, "Shape", "s", {"w"}, {"ws"});
  addNode(g, "MatMul", "m", {"in", "w"}, {"h"});
  addNode(g, "CastLike", "c", {"h", "w"}, {"hc"});
  EXPECT_TRUE(plan(g, TiedInitializers::Untie).empty());
  auto r = reads(g, TiedInitializers::Untie);
  EXPECT_EQ(r["m"], v({"in", "w"}));
  // A second use of the values still splits, and the metadata reads keep the
  // original name.
  addNode(g, "Add", "a", {"hc", "w"}, {"o"});
  r = reads(g, TiedInitializers::Untie);
  EXPECT_EQ(r["a"], v({"hc", "w.1"}));
  EXPECT_EQ(r["s"], v({"w"}));
  EXPECT_EQ(r["c"], v({"h", "w"}));
}

TEST(SharedInitializers, KeepTiesTrainableUsesButNeverRunningStatistics) {
  // Zeros read as bn1's bias (directly) and, through the alias "z", as bn2's
  // bias and running mean: keep leaves the biases tied and gives the running
  // mean a copy of its own, as "z" must stay for bn2's bias.
  onnx::GraphProto g;
  addInit(g, "zeros", {3});
  addInit(g, "ones", {3});
  addNode(g, "Identity", "id", {"zeros"}, {"z"});
  addNode(g, "BatchNormalization", "bn1", {"x", "ones", "zeros", "zeros", "ones"}, {"y1"});
  addNode(g, "BatchNormalization", "bn2", {"y1", "ones", "z", "z", "ones"}, {"y2"});
  auto keep = reads(g, TiedInitializers::Keep);
  EXPECT_EQ(keep.count("id"), 1u);
  EXPECT_EQ(keep["bn1"], v({"x", "ones", "zeros", "zeros.1", "ones.1"}));
  EXPECT_EQ(keep["bn2"], v({"y1", "ones", "z", "z.1", "ones.2"}));
  auto untie = reads(g, TiedInitializers::Untie);
  EXPECT_EQ(untie.count("id"), 0u);
  EXPECT_EQ(untie["bn1"], v({"x", "ones", "zeros", "zeros.1", "ones.1"}));
  EXPECT_EQ(untie["bn2"], v({"y1", "ones.2", "z", "z.1", "ones.3"}));
}

TEST(SharedInitializers, ScalarsIntegersAndGraphOutputsStayAsTheyAre) {
  onnx::GraphProto g;
  addInit(g, "half", {});
  addInit(g, "shape", {2}, onnx::TensorProto::INT64);
  addNode(g, "Mul", "m1", {"x", "half"}, {"a"});
  addNode(g, "Mul", "m2", {"a", "half"}, {"b"});
  addNode(g, "Reshape", "r1", {"b", "shape"}, {"c"});
  addNode(g, "Reshape", "r2", {"c", "shape"}, {"d"});
  EXPECT_TRUE(plan(g, TiedInitializers::Untie).empty());
  // An Identity whose output is a graph output is a use like any other.
  onnx::GraphProto out;
  addInit(out, "w", {2});
  addNode(out, "Identity", "id", {"w"}, {"result"});
  addNode(out, "Relu", "r", {"w"}, {"s"});
  out.add_output()->set_name("result");
  auto r = reads(out, TiedInitializers::Untie);
  EXPECT_EQ(r["id"], v({"w"}));
  EXPECT_EQ(r["r"], v({"w.1"}));
}

TEST(SharedInitializers, ASourceNoNodeReadsIsReported) {
  onnx::GraphProto g;
  addInit(g, "x", {2});
  addNode(g, "Identity", "i1", {"x"}, {"a"});
  addNode(g, "Identity", "i2", {"x"}, {"b"});
  addNode(g, "Relu", "r1", {"a"}, {"ra"});
  addNode(g, "Relu", "r2", {"b"}, {"rb"});
  lwcc::InitializerSplit split = plan(g, TiedInitializers::Untie);
  lwcc::RewrittenNodes nodes = lwcc::applyInitializerSplit(g, split);
  EXPECT_EQ(nodes.nodes.size(), 2u);
  EXPECT_EQ(nodes.unreadSources, std::set<std::string>{"x"});
}

TEST(SharedInitializers, AutoKeepsATiedEmbeddingUntiesVectorsAndRefusesTheRest) {
  // GPT-2's output layer tied to its token embedding: one table that a
  // Gather looks rows up in and a Transpose feeds to the logits' MatMul.
  onnx::GraphProto g;
  addInit(g, "wte", {16, 4});
  addInit(g, "ln.weight", {4});
  addNode(g, "Gather", "embed", {"wte", "ids"}, {"h"});
  addNode(g, "LayerNormalization", "ln_1", {"h", "ln.weight"}, {"a"});
  addNode(g, "LayerNormalization", "ln_2", {"a", "ln.weight"}, {"b"});
  addNode(g, "Transpose", "lm_head_t", {"wte"}, {"wt"});
  addNode(g, "MatMul", "lm_head", {"b", "wt"}, {"logits"});
  // The table stays one param; the norms' equal scales get one each.
  lwcc::InitializerSplit split = plan(g, TiedInitializers::Auto);
  ASSERT_EQ(split.copies.size(), 1u);
  EXPECT_EQ(split.copies[0].source, "ln.weight");
  auto r = reads(g, TiedInitializers::Auto);
  EXPECT_EQ(r["embed"], v({"wte", "ids"}));
  EXPECT_EQ(r["lm_head_t"], v({"wte"}));
  EXPECT_NE(r["ln_1"][1], r["ln_2"][1]);
  // Untie splits the table too; Keep ties the norms too.
  EXPECT_EQ(plan(g, TiedInitializers::Untie).copies.size(), 2u);
  EXPECT_EQ(plan(g, TiedInitializers::Keep).copies.size(), 0u);

  // A matrix two MatMuls read: one weight applied twice, or two equal ones
  // deduplicated: the error names it and its readers.
  onnx::GraphProto twice;
  addInit(twice, "w", {4, 4});
  addNode(twice, "MatMul", "first", {"x", "w"}, {"y"});
  addNode(twice, "MatMul", "second", {"y", "w"}, {"z"});
  auto refused = lwcc::planInitializerSplit(twice, TiedInitializers::Auto);
  ASSERT_FALSE(static_cast<bool>(refused));
  std::string msg = llvm::toString(refused.takeError());
  EXPECT_NE(msg.find("initializer 'w' is read as a weight by 2 nodes ('first' (MatMul), "
                     "'second' (MatMul))"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--tied-initializers=keep"), std::string::npos) << msg;
  EXPECT_EQ(plan(twice, TiedInitializers::Untie).copies.size(), 1u);
  EXPECT_EQ(plan(twice, TiedInitializers::Keep).copies.size(), 0u);
}

TEST(SharedInitializers, AChoiceByNameOverridesTheFilesForThatInitializer) {
  // Two matrices each read by two MatMuls: auto refuses both; a choice by
  // name decides one, and the other is still refused unless named too.
  onnx::GraphProto g;
  addInit(g, "w", {4, 4});
  addInit(g, "u", {4, 4});
  addNode(g, "MatMul", "first", {"x", "w"}, {"y"});
  addNode(g, "MatMul", "second", {"y", "w"}, {"z"});
  addNode(g, "MatMul", "third", {"z", "u"}, {"s"});
  addNode(g, "MatMul", "fourth", {"s", "u"}, {"t"});
  auto parsed = lwcc::parseTiedChoice("auto,keep:w");
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  auto refused = lwcc::planInitializerSplit(g, *parsed);
  ASSERT_FALSE(static_cast<bool>(refused));
  std::string msg = llvm::toString(refused.takeError());
  EXPECT_NE(msg.find("initializer 'u'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--tied-initializers=keep:u"), std::string::npos) << msg;

  parsed = lwcc::parseTiedChoice("keep:w,untie:u");
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(parsed->mode, TiedInitializers::Auto);
  auto r = reads(g, *parsed);
  EXPECT_EQ(r["first"][1], "w");
  EXPECT_EQ(r["second"][1], "w");           // one param
  EXPECT_NE(r["third"][1], r["fourth"][1]); // one each

  // The file's untie, with w kept by name.
  parsed = lwcc::parseTiedChoice("untie,keep:w");
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  lwcc::InitializerSplit split = plan(g, *parsed);
  ASSERT_EQ(split.copies.size(), 1u);
  EXPECT_EQ(split.copies[0].source, "u");

  // A name no two nodes read as a weight is an error naming it.
  parsed = lwcc::parseTiedChoice("keep:nothing");
  ASSERT_TRUE(static_cast<bool>(parsed));
  auto unknown = lwcc::planInitializerSplit(g, *parsed);
  ASSERT_FALSE(static_cast<bool>(unknown));
  msg = llvm::toString(unknown.takeError());
  EXPECT_NE(msg.find("'nothing'"), std::string::npos) << msg;
}

TEST(SharedInitializers, TheFlagsValueIsParsedOrItsWrongEntryNamed) {
  auto ok = lwcc::parseTiedChoice("keep");
  ASSERT_TRUE(static_cast<bool>(ok));
  EXPECT_EQ(ok->mode, TiedInitializers::Keep);
  EXPECT_TRUE(ok->byName.empty());
  for (auto [spec, named] : std::vector<std::pair<std::string, std::string>>{
           {"tie", "'tie'"},
           {"keep,untie", "'untie' is a second choice"},
           {"auto:w", "'auto:w'"},
           {"keep:", "'keep:'"},
           {"keep:w,untie:w", "'w' is named twice"},
           {"auto,", "''"}}) {
    auto bad = lwcc::parseTiedChoice(spec);
    ASSERT_FALSE(static_cast<bool>(bad)) << spec;
    std::string msg = llvm::toString(bad.takeError());
    EXPECT_NE(msg.find(named), std::string::npos) << spec << ": " << msg;
  }
}

} // namespace
