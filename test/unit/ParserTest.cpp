//===- ParserTest.cpp - The .lwir reader and printer ----------------------===//
#include "TestUtil.h"

#include <cmath>
#include <limits>

using namespace lwcc;
using namespace lwcc::test;

namespace {

using Ints = std::vector<int64_t>;

/// printGraph(parse(text)), and checks that printing is a fixed point:
/// print(parse(print(parse(text)))) == print(parse(text)).
std::string roundTrip(std::string_view text) {
  auto g = parseOk(text, "rt.lwir");
  if (!g)
    return "";
  std::string once = printGraph(*g);
  auto again = parseOk(once, "rt2.lwir");
  if (!again)
    return once;
  EXPECT_EQ(printGraph(*again), once) << "printing is not a fixed point";
  return once;
}

//===----------------------------------------------------------------------===//
// Success cases
//===----------------------------------------------------------------------===//

TEST(Parser, CanonicalTextPrintsBackUnchanged) {
  const char* text = R"(graph @main(%x: f32[2,4,8,8] @data, %y: i64[2] @label) {
  %w = param "conv.weight" : f32[4,4,3,3] @dev(1)
  %b = param "conv.bias" : f32[4] @dev(1)
  %c = conv2d(%x, %w, %b) {strides = [1, 1], pads = [1, 1, 1, 1]} : f32[2,4,8,8] @par(n = 2, c = 2, devices = [0, 1, 2, 3]) @dev(1) @stream(0) @mb(3) @buf(128) loc("conv1")
  %a, %s = split(%c) {axis = 1, split = [1, 3]} : f32[2,1,8,8], f32[2,3,8,8] @dev(1)
  %t = device_copy(%s) {src = 1, dst = 0} : f32[2,3,8,8]
  %r = relu(%t) : f32[2,3,8,8]
  return %a, %r
}
)";
  auto g = parseOk(text, "t.lwir");
  ASSERT_TRUE(g);
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  EXPECT_EQ(printGraph(*g), text);
  EXPECT_EQ(roundTrip(text), text);
}

TEST(Parser, AllAnnotations) {
  auto g = parseOk(R"(graph @main(%x: f32[2,4,8,8] @data) {
  %c = relu(%x) : f32[2,4,8,8] @par(n = 2, c = 2, devices = [0, 1, 2, 3]) @dev(1) @stream(0) @mb(3) @buf(128) loc("r1")
  %d = relu(%x) : f32[2,4,8,8] @buf(0) @mb(0) @dev(2) @par(d3 = 8)
  %e = relu(%x) : f32[2,4,8,8] @par()
  return %e
}
)",
                   "t.lwir");
  ASSERT_TRUE(g);
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  auto ops = opList(*g);
  ASSERT_EQ(ops.size(), 3u);
  const Annotations& a = ops[0]->annotations();
  ASSERT_TRUE(a.par);
  EXPECT_EQ(a.par->degrees, (std::vector<std::pair<std::string, int64_t>>{{"n", 2}, {"c", 2}}));
  EXPECT_EQ(a.par->devices, (Ints{0, 1, 2, 3}));
  EXPECT_EQ(a.device, std::optional<int64_t>(1));
  EXPECT_EQ(a.stream, std::optional<int64_t>(0));
  EXPECT_EQ(a.microBatch, std::optional<int64_t>(3));
  EXPECT_EQ(a.bufferOffsets, std::optional<Ints>(Ints{128}));
  EXPECT_EQ(ops[0]->loc().name, "r1");
  EXPECT_EQ(ops[0]->loc().str(), "t.lwir:2:3");

  // Any order; printed in a fixed order.
  const Annotations& b = ops[1]->annotations();
  EXPECT_EQ(b.device, std::optional<int64_t>(2));
  EXPECT_FALSE(b.stream);
  EXPECT_EQ(annotationsStr(b), "@par(d3 = 8) @dev(2) @mb(0) @buf(0)");
  EXPECT_TRUE(ops[1]->loc().name.empty());

  ASSERT_TRUE(ops[2]->annotations().par);
  EXPECT_EQ(*ops[2]->annotations().par, ParallelConfig{});
  EXPECT_FALSE(ops[2]->annotations().device);

  std::string printed = roundTrip(printGraph(*g));
  EXPECT_NE(printed.find("@par(d3 = 8) @dev(2) @mb(0) @buf(0)\n"), std::string::npos) << printed;
}

TEST(Parser, QuotedNamesWithSpecialCharacters) {
  const char* text = R"(graph @"my graph"(%"in put": f32[2] @data, %a.b/c-d$e: f32[2] @data) {
  %"w \"q\" \\ \n" = param "layer.0/weight\t\41" : f32[2]
  %"sum:1" = add(%"in put", %"w \"q\" \\ \n") : f32[2] loc("node \"x\"")
  %0 = relu(%"sum:1") : f32[2]
  return %0, %a.b/c-d$e
}
)";
  auto g = parseOk(text);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->name(), "my graph");
  EXPECT_EQ(g->input(0)->name(), "in put");
  EXPECT_EQ(g->input(1)->name(), "a.b/c-d$e");
  EXPECT_EQ(g->param(0)->name(), "w \"q\" \\ \n");
  EXPECT_EQ(g->param(0)->paramName(), "layer.0/weight\tA");
  auto ops = opList(*g);
  EXPECT_EQ(ops[0]->result()->name(), "sum:1");
  EXPECT_EQ(ops[0]->loc().name, "node \"x\"");
  EXPECT_EQ(ops[1]->result()->name(), "0");
  EXPECT_EQ(errorText(verifyGraph(*g)), "");

  std::string printed = roundTrip(text);
  EXPECT_NE(
      printed.find("graph @\"my graph\"(%\"in put\": f32[2] @data, %a.b/c-d$e: f32[2] @data)"),
      std::string::npos)
      << printed;
  EXPECT_NE(printed.find("%\"w \\\"q\\\" \\\\ \\n\" = param \"layer.0/weight\\tA\""),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("loc(\"node \\\"x\\\"\")"), std::string::npos) << printed;

  EXPECT_TRUE(isBareName("a.b/c-d$e_0"));
  EXPECT_FALSE(isBareName(""));
  EXPECT_FALSE(isBareName("a b"));
  EXPECT_FALSE(isBareName("sum:1"));
}

TEST(Parser, ControlCharactersRoundTrip) {
  Graph g("g");
  Value* x = g.addInput(std::string("x\x01\x7f\xe9", 4), f32({2}));
  g.addOutput(x);
  std::string printed = printGraph(g);
  EXPECT_NE(printed.find("%\"x\\01\\7F\\E9\""), std::string::npos) << printed;
  auto back = parseOk(printed);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->input(0)->name(), x->name());
}

TEST(Parser, NegativeAndExtremeIntegers) {
  const char* text = R"(graph @g(%x: f32[4,4] @data) {
  %p = pad(%x) {pads = [-1, 0, 1, 0]} : f32[4,4]
  %s = slice(%p) {starts = [-1], ends = [-9223372036854775808], axes = [0], steps = [-1]} : f32[4,4]
  %t = slice(%s) {starts = [+1], ends = [9223372036854775807]} : f32[3,4]
  %f = flatten(%t) {axis = -1} : f32[3,4]
  return %f
}
)";
  auto g = parseOk(text);
  ASSERT_TRUE(g);
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  auto ops = opList(*g);
  EXPECT_EQ(ops[0]->getInts("pads"), (Ints{-1, 0, 1, 0}));
  EXPECT_EQ(ops[1]->getInts("ends"), (Ints{std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(ops[1]->getInts("steps"), (Ints{-1}));
  EXPECT_EQ(ops[2]->getInts("starts"), (Ints{1}));
  EXPECT_EQ(ops[2]->getInts("ends"), (Ints{std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(ops[3]->getInt("axis"), -1);
  roundTrip(text);
}

TEST(Parser, Floats) {
  const char* text = R"(graph @g(%x: f32[2,3] @data) {
  %a = leaky_relu(%x) {alpha = 1e-05} : f32[2,3]
  %b = clip(%a) {min = -inf, max = inf} : f32[2,3]
  %c = clip(%b) {min = -1.5E2, max = +inf} : f32[2,3]
  %d = leaky_relu(%c) {alpha = 2} : f32[2,3]
  %k = constant() {value = [nan, 1.5, -0.0, 2, 1e+20, -inf]} : f32[2,3]
  %e = add(%d, %k) : f32[2,3]
  return %e
}
)";
  auto g = parseOk(text);
  ASSERT_TRUE(g);
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  auto ops = opList(*g);
  constexpr double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ops[0]->getFloat("alpha"), 1e-05);
  EXPECT_EQ(ops[1]->getFloat("min"), -inf);
  EXPECT_EQ(ops[1]->getFloat("max"), inf);
  EXPECT_EQ(ops[2]->getFloat("min"), -150.0);
  EXPECT_EQ(ops[2]->getFloat("max"), inf);
  // An integer written for a float attribute is a float.
  ASSERT_TRUE(ops[3]->findAttr("alpha"));
  EXPECT_EQ(ops[3]->findAttr("alpha")->kind(), AttrKind::Float);
  EXPECT_EQ(ops[3]->getFloat("alpha"), 2.0);
  const auto& v = ops[4]->getFloats("value");
  ASSERT_EQ(v.size(), 6u);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 1.5);
  EXPECT_EQ(v[2], 0.0);
  EXPECT_TRUE(std::signbit(v[2]));
  EXPECT_EQ(v[3], 2.0);
  EXPECT_EQ(v[4], 1e20);
  EXPECT_EQ(v[5], -inf);

  std::string printed = roundTrip(text);
  EXPECT_NE(printed.find("{alpha = 1e-05}"), std::string::npos) << printed;
  EXPECT_NE(printed.find("{min = -inf, max = inf}"), std::string::npos) << printed;
  EXPECT_NE(printed.find("{min = -150.0, max = inf}"), std::string::npos) << printed;
  EXPECT_NE(printed.find("{alpha = 2.0}"), std::string::npos) << printed;
  EXPECT_NE(printed.find("{value = [nan, 1.5, -0.0, 2.0, 1e+20, -inf]}"), std::string::npos)
      << printed;
}

TEST(Parser, EmptyListsInputsAndReturn) {
  const char* text = R"(graph @g() {
  %k = constant() {value = []} : f32[0]
  %i = constant() {ivalue = []} : i64[0,3]
  %s = reduce_sum(%i) {axes = []} : i64[0,3]
  return
}
)";
  auto g = parseOk(text);
  ASSERT_TRUE(g);
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  EXPECT_TRUE(g->inputs().empty());
  EXPECT_TRUE(g->outputs().empty());
  auto ops = opList(*g);
  ASSERT_EQ(ops.size(), 3u);
  // The kind of an empty list comes from the op table.
  EXPECT_EQ(ops[0]->findAttr("value")->kind(), AttrKind::Floats);
  EXPECT_TRUE(ops[0]->getFloats("value").empty());
  EXPECT_EQ(ops[1]->findAttr("ivalue")->kind(), AttrKind::Ints);
  EXPECT_EQ(ops[2]->findAttr("axes")->kind(), AttrKind::Ints);
  EXPECT_TRUE(ops[2]->getInts("axes").empty());
  EXPECT_EQ(ops[0]->result()->type(), f32({0}));
  EXPECT_EQ(roundTrip(text), text);
}

TEST(Parser, MultiResultOpsAndComments) {
  const char* text = R"(// A leading comment.
graph @g(%x: f32[4,4] @data) { // trailing
  // A whole-line comment.
  %a, %b, %c = split(%x) {split = [1, 1, 2]} : f32[1,4], f32[1,4], f32[2,4]
  return %c, %a
}
// After the graph.
)";
  auto g = parseOk(text, "t.lwir");
  ASSERT_TRUE(g);
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  ASSERT_EQ(g->numOps(), 1u);
  Op* s = opList(*g)[0];
  ASSERT_EQ(s->numResults(), 3u);
  EXPECT_EQ(s->result(0)->name(), "a");
  EXPECT_EQ(s->result(2)->name(), "c");
  EXPECT_EQ(s->result(2)->type(), f32({2, 4}));
  EXPECT_EQ(s->result(1)->loc().str(), "t.lwir:4:7");
  EXPECT_EQ(s->loc().str(), "t.lwir:4:3");
  EXPECT_EQ(g->outputs(), (std::vector<Value*>{s->result(2), s->result(0)}));
  EXPECT_EQ(g->input(0)->loc().str(), "t.lwir:2:10");
  EXPECT_EQ(roundTrip(text), R"(graph @g(%x: f32[4,4] @data) {
  %a, %b, %c = split(%x) {split = [1, 1, 2]} : f32[1,4], f32[1,4], f32[2,4]
  return %c, %a
}
)");
}

TEST(Printer, NumbersUnnamedValuesAndOrdersAttributes) {
  Graph g("g");
  Value* x = g.addInput("x", f32({1, 3, 8, 8}));
  Value* w = g.addParam("", "w", f32({3, 3, 1, 1}));
  Builder b(g);
  Op* c = b.create(OpKind::Conv2d, {x, w}, {f32({1, 3, 8, 8})},
                   {{"group", Attribute(1)}, {"strides", Attribute(Ints{1, 1})}});
  Op* r = b.create(OpKind::Relu, {c->result()}, {f32({1, 3, 8, 8})});
  r->result()->setName("1"); // taken: numbering skips it
  Op* t = b.create(OpKind::Tanh, {r->result()}, {f32({1, 3, 8, 8})});
  g.addOutput(t->result());
  EXPECT_EQ(printGraph(g), R"(graph @g(%x: f32[1,3,8,8] @data) {
  %0 = param "w" : f32[3,3,1,1]
  %2 = conv2d(%x, %0) {strides = [1, 1], group = 1} : f32[1,3,8,8]
  %1 = relu(%2) : f32[1,3,8,8]
  %3 = tanh(%1) : f32[1,3,8,8]
  return %3
}
)");
  roundTrip(printGraph(g));
}

//===----------------------------------------------------------------------===//
// Errors: "name:LINE:COL: message"
//===----------------------------------------------------------------------===//

/// Parses `text` as "t.lwir" and returns the error text ("" on success).
std::string parseError(std::string_view text) {
  auto g = parseGraph(text, "t.lwir");
  if (g)
    return "";
  ErrorParts e = inspect(g.takeError());
  EXPECT_TRUE(e.located) << e.full;
  EXPECT_EQ(e.loc.file, "t.lwir");
  return e.full;
}

const char* kHead = "graph @g(%x: f32[2] @data) {\n";

TEST(ParserErrors, UndefinedValue) {
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = relu(%z) : f32[2]\n  return %y\n}\n"),
            "t.lwir:2:13: use of undefined value '%z'");
  EXPECT_EQ(parseError(std::string(kHead) + "  return %nope\n}\n"),
            "t.lwir:2:10: use of undefined value '%nope'");
  // A value is not visible in its own defining op.
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = relu(%y) : f32[2]\n  return %y\n}\n"),
            "t.lwir:2:13: use of undefined value '%y'");
}

TEST(ParserErrors, Redefinition) {
  EXPECT_EQ(parseError(std::string(kHead) + "  %x = relu(%x) : f32[2]\n  return %x\n}\n"),
            "t.lwir:2:3: redefinition of '%x'");
  EXPECT_EQ(parseError("graph @g(%x: f32[2] @data, %x: f32[2] @data) {\n  return\n}\n"),
            "t.lwir:1:28: redefinition of '%x'");
  EXPECT_EQ(parseError(std::string(kHead) +
                       "  %a, %a = split(%x) {split = [1, 1]} : f32[1], f32[1]\n  return\n}\n"),
            "t.lwir:2:7: redefinition of '%a'");
  EXPECT_EQ(parseError(std::string(kHead) + "  %x = param \"w\" : f32[2]\n  return\n}\n"),
            "t.lwir:2:3: redefinition of '%x'");
}

TEST(ParserErrors, UnknownOp) {
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = frobnicate(%x) : f32[2]\n  return %y\n}\n"),
            "t.lwir:2:8: unknown op 'frobnicate'");
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = Relu(%x) : f32[2]\n  return %y\n}\n"),
            "t.lwir:2:8: unknown op 'Relu'");
}

TEST(ParserErrors, BadType) {
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = relu(%x) : f31[2]\n  return %y\n}\n"),
            "t.lwir:2:19: unknown element type 'f31' (expected f32, f64, f16, bf16, i64, i32 "
            "or bool)");
  EXPECT_EQ(parseError("graph @g(%x: 3 @data) {\n  return\n}\n"),
            "t.lwir:1:14: expected a tensor type such as f32[2,3], got '3'");
  EXPECT_EQ(parseError("graph @g(%x: f32 @data) {\n  return\n}\n"),
            "t.lwir:1:18: expected '[', got '@data'");
  EXPECT_EQ(parseError("graph @g(%x: f32[2 3] @data) {\n  return\n}\n"),
            "t.lwir:1:20: expected ',' or ']', got '3'");
  EXPECT_EQ(parseError("graph @g(%x: f32[2.5] @data) {\n  return\n}\n"),
            "t.lwir:1:18: expected an integer, got '2.5'");
}

TEST(ParserErrors, NegativeDimension) {
  EXPECT_EQ(parseError("graph @g(%x: f32[2,-1] @data) {\n  return\n}\n"),
            "t.lwir:1:17: negative dimension -1 in shape");
}

TEST(ParserErrors, TooManyElements) {
  EXPECT_EQ(parseError("graph @g(%x: f32[1048576,1048576,1048576] @data) {\n  return\n}\n"),
            "t.lwir:1:17: shape [1048576,1048576,1048576] has too many elements");
  // A zero dim does not hide the other dims' product.
  EXPECT_EQ(parseError("graph @g(%x: f32[0,16777216,16777216,16777216] @data) {\n  return\n}\n"),
            "t.lwir:1:17: shape [0,16777216,16777216,16777216] has too many elements");
  // 2^48 elements is the limit.
  EXPECT_EQ(parseError("graph @g(%x: f32[16777216,16777216] @data) {\n  return %x\n}\n"), "");
  EXPECT_EQ(parseError("graph @g(%x: f32[0,281474976710656] @data) {\n  return %x\n}\n"), "");
}

TEST(ParserErrors, Strings) {
  EXPECT_EQ(parseError(std::string(kHead) + "  %w = param \"abc"),
            "t.lwir:2:14: unterminated string");
  EXPECT_EQ(parseError(std::string(kHead) + "  %w = param \"abc\\"),
            "t.lwir:2:14: unterminated string");
  EXPECT_EQ(parseError(std::string(kHead) + "  %w = param \"abc\n\" : f32[2]\n  return\n}\n"),
            "t.lwir:2:14: newline in string");
  EXPECT_EQ(parseError(std::string(kHead) + "  %w = param \"a\\qb\" : f32[2]\n  return\n}\n"),
            "t.lwir:2:14: unknown escape '\\q' in string");
  EXPECT_EQ(parseError(std::string(kHead) + "  %w = param \"a\\4\" : f32[2]\n  return\n}\n"),
            "t.lwir:2:14: unknown escape '\\4' in string");
  EXPECT_EQ(parseError(std::string(kHead) + "  %\"\" = relu(%x) : f32[2]\n  return\n}\n"),
            "t.lwir:2:3: empty name");
}

TEST(ParserErrors, MissingOrUnknownRole) {
  EXPECT_EQ(parseError("graph @g(%x: f32[2]) {\n  return\n}\n"),
            "t.lwir:1:20: expected the input role @data or @label, got ')'");
  EXPECT_EQ(parseError("graph @g(%x: f32[2] @weights) {\n  return\n}\n"),
            "t.lwir:1:21: expected the input role @data or @label, got '@weights'");
}

TEST(ParserErrors, TrailingText) {
  EXPECT_EQ(parseError(std::string(kHead) + "  return %x\n}\nextra\n"),
            "t.lwir:4:1: expected end of file after the graph, got 'extra'");
  EXPECT_EQ(parseError(std::string(kHead) + "  return %x\n}\n}"),
            "t.lwir:4:1: expected end of file after the graph, got '}'");
  EXPECT_EQ(parseError(std::string(kHead) + "  return %x\n"),
            "t.lwir:3:1: expected '}' after the return statement, got end of file");
}

TEST(ParserErrors, IntegerOutOfRange) {
  EXPECT_EQ(parseError(std::string(kHead) +
                       "  %y = concat(%x) {axis = 99999999999999999999} : f32[2]\n  return\n}\n"),
            "t.lwir:2:27: integer '99999999999999999999' is out of range");
  EXPECT_EQ(parseError(std::string(kHead) +
                       "  %y = concat(%x) {axis = -9223372036854775809} : f32[2]\n  return\n}\n"),
            "t.lwir:2:27: integer '-9223372036854775809' is out of range");
  EXPECT_EQ(parseError("graph @g(%x: f32[9223372036854775808] @data) {\n  return\n}\n"),
            "t.lwir:1:18: integer '9223372036854775808' is out of range");
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = relu(%x) : f32[2] @dev(99999999999999999999)\n"
                                            "  return\n}\n"),
            "t.lwir:2:31: integer '99999999999999999999' is out of range");
}

TEST(ParserErrors, OtherStructuralErrors) {
  EXPECT_EQ(parseError("grph @g() {\n  return\n}\n"), "t.lwir:1:1: expected 'graph', got 'grph'");
  EXPECT_EQ(parseError(std::string(kHead) +
                       "  %a, %b = split(%x) {split = [1, 1]} : f32[1]\n  return\n}\n"),
            "t.lwir:2:12: 'split' has 2 results but 1 result types");
  EXPECT_EQ(parseError(std::string(kHead) +
                       "  %y = relu(%x) : f32[2]\n  %w = param \"w\" : f32[2]\n  return\n}\n"),
            "t.lwir:3:3: params must be declared before the first op");
  EXPECT_EQ(parseError(std::string(kHead) + "  %a, %b = param \"w\" : f32[2]\n  return\n}\n"),
            "t.lwir:2:7: a param defines one value");
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = relu(%x) : f32[2] @gpu(1)\n  return\n}\n"),
            "t.lwir:2:26: unknown annotation '@gpu' (expected @par, @dev, @stream, @mb or @buf)");
  EXPECT_EQ(
      parseError(std::string(kHead) + "  %y = relu(%x) : f32[2] @dev(1) @dev(2)\n  return\n}\n"),
      "t.lwir:2:34: annotation '@dev' is given twice");
  EXPECT_EQ(parseError(std::string(kHead) + "  %y = relu(%x) : f32[2] #\n  return\n}\n"),
            "t.lwir:2:26: unexpected character '#'");
}

TEST(ParserErrors, DuplicateAttribute) {
  EXPECT_EQ(parseError(std::string(kHead) +
                       "  %y = concat(%x) {axis = 0, axis = 1} : f32[2]\n  return %y\n}\n"),
            "t.lwir:2:30: attribute 'axis' is given twice");
}

} // namespace
