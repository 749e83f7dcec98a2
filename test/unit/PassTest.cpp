//===- PassTest.cpp - Passes run through the pipeline API -----------------===//
#include "TestUtil.h"
#include "plan/Pipelines.h"

#include "llvm/Support/raw_ostream.h"

#include <set>

using namespace lwcc;
using namespace lwcc::test;

namespace {

struct Diag {
  Severity sev;
  Location loc;
  std::string msg;
};

/// Runs the named passes on `g`; diagnostics go to `diags`.
llvm::Error runPasses(Graph& g, const std::vector<std::string>& names,
                      std::vector<Diag>* diags = nullptr, PassRunOptions opts = {}) {
  auto pipeline = buildPipeline(names);
  if (!pipeline)
    return pipeline.takeError();
  PassContext ctx;
  if (diags)
    ctx.diag = [diags](Severity s, const Location& l, const std::string& m) {
      diags->push_back({s, l, m});
    };
  return runPipeline(g, *pipeline, ctx, opts);
}

/// Parses, runs the passes (which must succeed), verifies, and prints.
std::string runOn(std::string_view text, const std::vector<std::string>& names) {
  auto g = parseOk(text);
  if (!g)
    return "";
  if (llvm::Error e = runPasses(*g, names)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return "";
  }
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  return printGraph(*g);
}

/// The single constant op of `g` that defines output #i.
const Op* outputConstant(const Graph& g, unsigned i = 0) {
  const Op* def = g.outputs().at(i)->definingOp();
  EXPECT_TRUE(def && def->kind() == OpKind::Constant);
  return def;
}

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

TEST(Passes, RegistryAndPipelines) {
  for (const char* name : {"verify", "dce", "canonicalize", "shape-infer"}) {
    const PassInfo* info = lookupPass(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->name, name);
    EXPECT_FALSE(info->description.empty());
    auto one = buildPipeline(std::vector<std::string>{name});
    ASSERT_TRUE(!!one) << llvm::toString(one.takeError());
    ASSERT_EQ(one->size(), 1u);
    EXPECT_EQ((*one)[0]->name(), name);
  }
  EXPECT_EQ(lookupPass("nope"), nullptr);
  EXPECT_EQ(lookupPass(""), nullptr);
  std::set<std::string_view> names;
  for (const PassInfo& p : allPasses())
    EXPECT_TRUE(names.insert(p.name).second) << "pass registered twice: " << p.name;

  auto cleanup = buildPipeline("cleanup");
  ASSERT_TRUE(!!cleanup) << llvm::toString(cleanup.takeError());
  std::vector<std::string_view> order;
  for (auto& p : *cleanup)
    order.push_back(p->name());
  EXPECT_EQ(order, (std::vector<std::string_view>{"canonicalize", "dce", "shape-infer", "verify"}));
}

TEST(Passes, UnknownPassOrPipeline) {
  auto p = buildPipeline(std::vector<std::string>{"dce", "nope", "verify"});
  ASSERT_FALSE(p);
  EXPECT_EQ(llvm::toString(p.takeError()), "unknown pass 'nope'");
  auto q = buildPipeline(std::string_view("no-such-pipeline"));
  ASSERT_FALSE(q);
  EXPECT_EQ(llvm::toString(q.takeError()), "unknown pipeline 'no-such-pipeline'");
  auto empty = buildPipeline(std::vector<std::string>{});
  ASSERT_TRUE(!!empty);
  EXPECT_TRUE(empty->empty());
}

//===----------------------------------------------------------------------===//
// dce
//===----------------------------------------------------------------------===//

TEST(DCE, RemovesDeadChainsAndUnusedParamsButKeepsInputs) {
  const char* text = R"(graph @g(%x: f32[2] @data, %unused: f32[2] @data, %y: i64[2] @label) {
  %w = param "w" : f32[2]
  %dead_w = param "dead" : f32[2]
  %a = add(%x, %dead_w) : f32[2]
  %b = relu(%a) : f32[2]
  %c = tanh(%b) : f32[2]
  %s1, %s2 = split(%x) {split = [1, 1]} : f32[1], f32[1]
  %live = mul(%x, %w) : f32[2]
  return %live, %s2
}
)";
  EXPECT_EQ(runOn(text, {"dce"}),
            R"(graph @g(%x: f32[2] @data, %unused: f32[2] @data, %y: i64[2] @label) {
  %w = param "w" : f32[2]
  %s1, %s2 = split(%x) {split = [1, 1]} : f32[1], f32[1]
  %live = mul(%x, %w) : f32[2]
  return %live, %s2
}
)");
}

TEST(DCE, EverythingDeadWithoutOutputs) {
  auto g = parseOk(R"(graph @g(%x: f32[2] @data) {
  %w = param "w" : f32[2]
  %a = add(%x, %w) : f32[2]
  %b = relu(%a) : f32[2]
  return
}
)");
  ASSERT_TRUE(g);
  ASSERT_FALSE(runPasses(*g, {"dce"}));
  EXPECT_EQ(g->numOps(), 0u);
  EXPECT_TRUE(g->params().empty());
  EXPECT_EQ(g->inputs().size(), 1u);
  EXPECT_FALSE(g->input(0)->hasUses());
}

//===----------------------------------------------------------------------===//
// canonicalize
//===----------------------------------------------------------------------===//

TEST(Canonicalize, DropsIdentity) {
  EXPECT_EQ(runOn(R"(graph @g(%x: f32[2,3] @data) {
  %i = identity(%x) : f32[2,3]
  %j = identity(%i) : f32[2,3]
  %r = relu(%j) : f32[2,3]
  %o = identity(%r) : f32[2,3]
  return %o, %j
}
)",
                  {"canonicalize"}),
            R"(graph @g(%x: f32[2,3] @data) {
  %r = relu(%x) : f32[2,3]
  return %r, %x
}
)");
}

TEST(Canonicalize, FoldsReshapeChains) {
  EXPECT_EQ(runOn(R"(graph @g(%x: f32[2,3,4] @data) {
  %a = reshape(%x) {shape = [6, 4]} : f32[6,4]
  %b = reshape(%a) {shape = [24]} : f32[24]
  %c = flatten(%b) {axis = 0} : f32[1,24]
  return %c
}
)",
                  {"canonicalize"}),
            R"(graph @g(%x: f32[2,3,4] @data) {
  %c = reshape(%x) {shape = [1, 24]} : f32[1,24]
  return %c
}
)");
  // Back to the operand's own shape: no reshape at all.
  EXPECT_EQ(runOn(R"(graph @g(%x: f32[2,3,4] @data) {
  %a = reshape(%x) {shape = [24]} : f32[24]
  %b = reshape(%a) {shape = [2, 3, 4]} : f32[2,3,4]
  %r = relu(%b) : f32[2,3,4]
  return %r
}
)",
                  {"canonicalize"}),
            R"(graph @g(%x: f32[2,3,4] @data) {
  %r = relu(%x) : f32[2,3,4]
  return %r
}
)");
  // An inner reshape with another use stays.
  EXPECT_EQ(runOn(R"(graph @g(%x: f32[2,3,4] @data) {
  %a = reshape(%x) {shape = [6, 4]} : f32[6,4]
  %b = reshape(%a) {shape = [24]} : f32[24]
  return %b, %a
}
)",
                  {"canonicalize"}),
            R"(graph @g(%x: f32[2,3,4] @data) {
  %a = reshape(%x) {shape = [6, 4]} : f32[6,4]
  %b = reshape(%x) {shape = [24]} : f32[24]
  return %b, %a
}
)");
}

TEST(Canonicalize, FoldsAddOfConstantsWithBroadcasting) {
  auto g = parseOk(R"(graph @g() {
  %a = constant() {value = [1.0, 2.0, 3.0]} : f32[3]
  %b = constant() {value = [10.0, 20.0]} : f32[2,1]
  %s = add(%a, %b) : f32[2,3]
  return %s
}
)");
  ASSERT_TRUE(g);
  ASSERT_FALSE(runPasses(*g, {"canonicalize"}));
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  ASSERT_EQ(g->numOps(), 1u); // the operands are pruned
  const Op* c = outputConstant(*g);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->result()->type(), f32({2, 3}));
  EXPECT_EQ(c->result()->name(), "s");
  EXPECT_EQ(c->getFloats("value"), (std::vector<double>{11, 12, 13, 21, 22, 23}));
}

TEST(Canonicalize, FoldsSplatsAndIntegers) {
  auto g = parseOk(R"(graph @g() {
  %a = constant() {ivalue = [1, 2, 3, 4]} : i64[2,2]
  %b = constant() {ivalue = [5]} : i64[2,2]
  %s = sub(%a, %b) : i64[2,2]
  %m = mul(%s, %s) : i64[2,2]
  return %m
}
)");
  ASSERT_TRUE(g);
  ASSERT_FALSE(runPasses(*g, {"canonicalize"}));
  ASSERT_EQ(g->numOps(), 1u);
  const Op* c = outputConstant(*g);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->hasAttr("value"));
  EXPECT_EQ(c->getInts("ivalue"), (std::vector<int64_t>{16, 9, 4, 1}));
}

TEST(Canonicalize, FoldedF32IsRoundedToF32) {
  auto g = parseOk(R"(graph @g() {
  %a = constant() {value = [0.1]} : f32[]
  %b = constant() {value = [0.2]} : f32[]
  %s = add(%a, %b) : f32[]
  %c = constant() {value = [0.1]} : f64[]
  %d = constant() {value = [0.2]} : f64[]
  %t = add(%c, %d) : f64[]
  return %s, %t
}
)");
  ASSERT_TRUE(g);
  ASSERT_FALSE(runPasses(*g, {"canonicalize"}));
  const Op* s = outputConstant(*g, 0);
  const Op* t = outputConstant(*g, 1);
  ASSERT_TRUE(s && t);
  ASSERT_EQ(s->getFloats("value").size(), 1u);
  double v = s->getFloats("value")[0];
  EXPECT_EQ(v, static_cast<double>(0.1f + 0.2f));
  EXPECT_EQ(v, static_cast<double>(static_cast<float>(v))); // representable in f32
  EXPECT_NE(v, 0.1 + 0.2);
  EXPECT_EQ(t->getFloats("value"), (std::vector<double>{0.1 + 0.2}));
  // The printed value reads back to the same double.
  auto back = parseOk(printGraph(*g));
  ASSERT_TRUE(back);
  EXPECT_EQ(outputConstant(*back, 0)->getFloats("value")[0], v);
}

TEST(Canonicalize, DoesNotFoldIntegerDivision) {
  const char* text = R"(graph @g() {
  %a = constant() {ivalue = [7, -7]} : i64[2]
  %b = constant() {ivalue = [2]} : i64[]
  %q = div(%a, %b) : i64[2]
  return %q
}
)";
  EXPECT_EQ(runOn(text, {"canonicalize"}), text);
  // Float division folds.
  auto g = parseOk(R"(graph @g() {
  %a = constant() {value = [7.0, -7.0]} : f64[2]
  %b = constant() {value = [2.0]} : f64[]
  %q = div(%a, %b) : f64[2]
  return %q
}
)");
  ASSERT_TRUE(g);
  ASSERT_FALSE(runPasses(*g, {"canonicalize"}));
  EXPECT_EQ(outputConstant(*g)->getFloats("value"), (std::vector<double>{3.5, -3.5}));
}

TEST(Canonicalize, DoesNotFoldIntegersBeyondDoublePrecision) {
  // 2^53 + 1 has no exact double: folding through doubles would give
  // 9007199254740992 - 1 instead of 9007199254740992.
  const char* big = R"(graph @g() {
  %a = constant() {ivalue = [9007199254740993]} : i64[]
  %b = constant() {ivalue = [1]} : i64[]
  %s = sub(%a, %b) : i64[]
  return %s
}
)";
  EXPECT_EQ(runOn(big, {"canonicalize"}), big);
  // Exact operands whose product is not exact.
  const char* product = R"(graph @g() {
  %a = constant() {ivalue = [4294967297]} : i64[]
  %m = mul(%a, %a) : i64[]
  return %m
}
)";
  EXPECT_EQ(runOn(product, {"canonicalize"}), product);
  // Below 2^53 integers fold exactly.
  auto g = parseOk(R"(graph @g() {
  %a = constant() {ivalue = [9007199254740990]} : i64[]
  %b = constant() {ivalue = [1]} : i64[]
  %s = add(%a, %b) : i64[]
  return %s
}
)");
  ASSERT_TRUE(g);
  ASSERT_FALSE(runPasses(*g, {"canonicalize"}));
  EXPECT_EQ(outputConstant(*g)->getInts("ivalue"), (std::vector<int64_t>{9007199254740991}));
  // i32 results wrap as the element type does.
  auto w = parseOk(R"(graph @g() {
  %a = constant() {ivalue = [2147483647]} : i32[]
  %b = constant() {ivalue = [1]} : i32[]
  %s = add(%a, %b) : i32[]
  return %s
}
)");
  ASSERT_TRUE(w);
  ASSERT_FALSE(runPasses(*w, {"canonicalize"}));
  EXPECT_EQ(outputConstant(*w)->getInts("ivalue"), (std::vector<int64_t>{-2147483648}));
}

TEST(Canonicalize, FoldsReshapeOfAConstant) {
  auto g = parseOk(R"(graph @g() {
  %a = constant() {value = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]} : f32[2,3]
  %r = reshape(%a) {shape = [3, 2]} : f32[3,2]
  %t = relu(%r) : f32[3,2]
  return %t
}
)");
  ASSERT_TRUE(g);
  ASSERT_FALSE(runPasses(*g, {"canonicalize"}));
  ASSERT_EQ(g->numOps(), 1u);
  const Op* c = outputConstant(*g);
  EXPECT_EQ(c->result()->type(), f32({3, 2}));
  EXPECT_EQ(c->getFloats("value"), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(Canonicalize, LeavesNonConstantArithmetic) {
  const char* text = R"(graph @g(%x: f32[2] @data) {
  %a = constant() {value = [1.0]} : f32[2]
  %s = add(%x, %a) : f32[2]
  return %s
}
)";
  EXPECT_EQ(runOn(text, {"canonicalize"}), text);
}

//===----------------------------------------------------------------------===//
// shape-infer
//===----------------------------------------------------------------------===//

TEST(ShapeInfer, UpdatesStaleTypesAndWarns) {
  auto g = parseOk(R"(graph @g(%x: f32[2,3] @data) {
  %r = relu(%x) : f32[2,2] loc("r")
  %t = tanh(%r) : f32[9]
  %u = sigmoid(%t) : f32[2,3]
  return %u
}
)",
                   "s.lwir");
  ASSERT_TRUE(g);
  EXPECT_NE(errorText(verifyGraph(*g)), "");
  std::vector<Diag> diags;
  ASSERT_FALSE(runPasses(*g, {"shape-infer"}, &diags));
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  ASSERT_EQ(diags.size(), 2u);
  EXPECT_EQ(diags[0].sev, Severity::Warning);
  EXPECT_EQ(diags[0].loc.str(), "s.lwir:2:3");
  EXPECT_EQ(diags[0].loc.name, "r");
  EXPECT_EQ(diags[0].msg, "'relu' op \"r\": result #0 type f32[2,2] changed to f32[2,3]");
  EXPECT_EQ(diags[1].sev, Severity::Warning);
  EXPECT_EQ(diags[1].loc.str(), "s.lwir:3:3");
  EXPECT_EQ(diags[1].msg, "'tanh' op: result #0 type f32[9] changed to f32[2,3]");
  for (const auto& op : g->ops())
    EXPECT_EQ(op->result()->type(), f32({2, 3}));
}

TEST(ShapeInfer, QuietWhenTypesAreRightAndFailsOnBadOperands) {
  auto ok = parseOk("graph @g(%x: f32[2] @data) {\n  %r = relu(%x) : f32[2]\n  return %r\n}\n");
  ASSERT_TRUE(ok);
  std::vector<Diag> diags;
  ASSERT_FALSE(runPasses(*ok, {"shape-infer"}, &diags));
  EXPECT_TRUE(diags.empty());

  auto bad = parseOk(R"(graph @g(%x: f32[2,3] @data, %y: f32[4,3] @data) {
  %s = add(%x, %y) : f32[2,3]
  return %s
}
)",
                     "b.lwir");
  ASSERT_TRUE(bad);
  ErrorParts e = inspect(runPasses(*bad, {"shape-infer"}));
  ASSERT_TRUE(e.located);
  EXPECT_EQ(e.full, "b.lwir:2:3: 'add' op: shapes [2,3] and [4,3] do not broadcast");
}

//===----------------------------------------------------------------------===//
// The pass manager
//===----------------------------------------------------------------------===//

/// Leaves the graph invalid: changes the first op's result type.
class CorruptPass : public Pass {
public:
  std::string_view name() const override { return "corrupt"; }
  llvm::Error run(Graph& g, PassContext& ctx) override {
    Op& op = *g.ops().front();
    ctx.warn(op.loc(), "corrupting");
    op.result()->setType(TensorType(DType::F64, {7}));
    return llvm::Error::success();
  }
};

const char* kRelu = "graph @g(%x: f32[2] @data) {\n  %r = relu(%x) : f32[2]\n  return %r\n}\n";

TEST(PassManager, VerifyEachNamesThePassThatBrokeTheGraph) {
  auto g = parseOk(kRelu, "c.lwir");
  ASSERT_TRUE(g);
  PassPipeline pipeline;
  pipeline.push_back(createDCEPass());
  pipeline.push_back(std::make_unique<CorruptPass>());
  pipeline.push_back(createVerifyPass());
  std::vector<Diag> diags;
  PassContext ctx;
  ctx.diag = [&](Severity s, const Location& l, const std::string& m) {
    diags.push_back({s, l, m});
  };
  PassRunOptions opts;
  opts.verifyEach = true;
  std::string msg = errorText(runPipeline(*g, pipeline, ctx, opts));
  EXPECT_NE(msg.find("the graph does not verify after pass 'corrupt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("c.lwir:2:3: 'relu' op: result #0 has type f64[7], but its operands give "
                     "f32[2]"),
            std::string::npos)
      << msg;
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].msg, "corrupting");

  // Without verifyEach the corruption goes unnoticed until the verify pass.
  auto h = parseOk(kRelu, "c.lwir");
  ASSERT_TRUE(h);
  PassContext quiet;
  std::string late = errorText(runPipeline(*h, pipeline, quiet));
  EXPECT_EQ(late.find("after pass"), std::string::npos) << late;
  EXPECT_NE(late.find("'relu' op: result #0 has type f64[7]"), std::string::npos) << late;

  // A pipeline that ends with the corruption succeeds without verifyEach.
  auto k = parseOk(kRelu);
  ASSERT_TRUE(k);
  PassPipeline corruptOnly;
  corruptOnly.push_back(std::make_unique<CorruptPass>());
  EXPECT_FALSE(runPipeline(*k, corruptOnly, quiet));
}

TEST(PassManager, PrintAfterAll) {
  auto g = parseOk(kRelu);
  ASSERT_TRUE(g);
  std::string out;
  llvm::raw_string_ostream os(out);
  PassRunOptions opts;
  opts.printAfterAll = &os;
  ASSERT_FALSE(runPasses(*g, {"dce", "verify"}, nullptr, opts));
  os.flush();
  EXPECT_EQ(out, "// ----- IR after dce ----- //\n" + std::string(kRelu) +
                     "// ----- IR after verify ----- //\n" + kRelu);
}

TEST(PassManager, CleanupPipeline) {
  auto g = parseOk(R"(graph @g(%x: f32[2,3] @data) {
  %w = param "w" : f32[2,3]
  %i = identity(%x) : f32[2,3]
  %r = relu(%i) : f32[2,2]
  %dead = tanh(%r) : f32[2,2]
  return %r
}
)");
  ASSERT_TRUE(g);
  auto pipeline = buildPipeline(std::string_view("cleanup"));
  ASSERT_TRUE(!!pipeline);
  std::vector<Diag> diags;
  PassContext ctx;
  ctx.diag = [&](Severity s, const Location& l, const std::string& m) {
    diags.push_back({s, l, m});
  };
  ASSERT_FALSE(runPipeline(*g, *pipeline, ctx));
  EXPECT_EQ(printGraph(*g), R"(graph @g(%x: f32[2,3] @data) {
  %r = relu(%x) : f32[2,3]
  return %r
}
)");
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].msg, "'relu' op: result #0 type f32[2,2] changed to f32[2,3]");
}

} // namespace
