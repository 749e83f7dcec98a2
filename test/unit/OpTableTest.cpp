//===- OpTableTest.cpp - The op table and the shared shape helpers --------===//
#include "TestUtil.h"

#include <limits>
#include <set>

using namespace lwcc;
using namespace lwcc::test;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

TEST(OpTable, EveryOpIsFoundByItsMnemonic) {
  ASSERT_FALSE(allOps().empty());
  std::set<std::string_view> mnemonics;
  for (size_t i = 0; i < allOps().size(); ++i) {
    const OpInfo& info = allOps()[i];
    SCOPED_TRACE(std::string(info.mnemonic));
    EXPECT_FALSE(info.mnemonic.empty());
    EXPECT_TRUE(mnemonics.insert(info.mnemonic).second) << "duplicate mnemonic";
    EXPECT_EQ(static_cast<size_t>(info.kind), i) << "table order differs from OpKind";
    EXPECT_EQ(opInfo(info.kind).kind, info.kind);
    EXPECT_EQ(&opInfo(info.kind), &info);
    std::optional<OpKind> k = lookupOpKind(info.mnemonic);
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(*k, info.kind);
  }
  EXPECT_EQ(mnemonics.size(), allOps().size());
}

TEST(OpTable, UnknownMnemonics) {
  EXPECT_FALSE(lookupOpKind(""));
  EXPECT_FALSE(lookupOpKind("frobnicate"));
  EXPECT_FALSE(lookupOpKind("Conv2d")); // mnemonics are case sensitive
  EXPECT_FALSE(lookupOpKind("conv2d "));
  EXPECT_EQ(lookupOpKind("conv2d"), OpKind::Conv2d);
  EXPECT_EQ(lookupOpKind("max_pool2d"), OpKind::MaxPool2d);
  EXPECT_EQ(lookupOpKind("constant"), OpKind::Constant);
}

TEST(OpTable, ArityIsConsistent) {
  for (const OpInfo& info : allOps()) {
    SCOPED_TRACE(std::string(info.mnemonic));
    EXPECT_GE(info.minOperands, 0);
    if (info.maxOperands >= 0)
      EXPECT_LE(info.minOperands, info.maxOperands);
    else
      EXPECT_EQ(info.maxOperands, -1);
    EXPECT_GE(info.numResults, -1); // 0: an op kept for its effect
    EXPECT_NE(info.shapeRule, nullptr);
  }
  EXPECT_EQ(opInfo(OpKind::Conv2d).minOperands, 2);
  EXPECT_EQ(opInfo(OpKind::Conv2d).maxOperands, 3);
  EXPECT_EQ(opInfo(OpKind::Concat).maxOperands, -1);
  EXPECT_EQ(opInfo(OpKind::Split).numResults, -1);
  EXPECT_EQ(opInfo(OpKind::Constant).verifyHook, &verify::constant);
}

TEST(OpTable, AttributeNamesAreUniquePerOp) {
  for (const OpInfo& info : allOps()) {
    SCOPED_TRACE(std::string(info.mnemonic));
    std::set<std::string_view> names;
    for (const AttrSpec& a : info.attrs) {
      EXPECT_TRUE(names.insert(a.name).second) << "duplicate attribute " << a.name;
      EXPECT_EQ(info.findAttr(a.name), &a);
    }
    EXPECT_EQ(info.findAttr("no_such_attribute"), nullptr);
  }
}

TEST(OpTable, DefaultsHaveTheirAttributesKind) {
  unsigned defaulted = 0;
  for (const OpInfo& info : allOps())
    for (const AttrSpec& a : info.attrs) {
      if (a.presence != AttrSpec::Defaulted)
        continue;
      ++defaulted;
      EXPECT_EQ(a.defaultValue.kind(), a.kind) << info.mnemonic << "." << a.name;
    }
  EXPECT_GT(defaulted, 0u);

  const AttrSpec* strides = opInfo(OpKind::Conv2d).findAttr("strides");
  ASSERT_NE(strides, nullptr);
  EXPECT_EQ(strides->presence, AttrSpec::Defaulted);
  EXPECT_EQ(strides->defaultValue, Attribute(std::vector<int64_t>{1, 1}));
  const AttrSpec* kernel = opInfo(OpKind::MaxPool2d).findAttr("kernel");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->presence, AttrSpec::Required);
  EXPECT_EQ(kernel->kind, AttrKind::Ints);
  const AttrSpec* axes = opInfo(OpKind::ReduceSum).findAttr("axes");
  ASSERT_NE(axes, nullptr);
  EXPECT_EQ(axes->presence, AttrSpec::Optional);
  const AttrSpec* mode = opInfo(OpKind::Pad).findAttr("mode");
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->defaultValue, Attribute("constant"));
  const AttrSpec* clipMin = opInfo(OpKind::Clip).findAttr("min");
  ASSERT_NE(clipMin, nullptr);
  EXPECT_EQ(clipMin->defaultValue.getFloat(), -std::numeric_limits<double>::infinity());
}

//===----------------------------------------------------------------------===//
// shape::windowOutput
//===----------------------------------------------------------------------===//

int64_t window(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe, int64_t d, bool ceil) {
  auto n = shape::windowOutput(in, k, s, pb, pe, d, ceil);
  if (!n) {
    ADD_FAILURE() << llvm::toString(n.takeError());
    return -1;
  }
  return *n;
}

TEST(WindowOutput, FloorMode) {
  EXPECT_EQ(window(32, 3, 1, 1, 1, 1, false), 32); // "same" conv
  EXPECT_EQ(window(32, 3, 1, 0, 0, 1, false), 30);
  EXPECT_EQ(window(7, 3, 2, 0, 0, 1, false), 3);
  EXPECT_EQ(window(8, 3, 2, 0, 0, 1, false), 3);
  EXPECT_EQ(window(8, 2, 2, 0, 0, 1, false), 4);
  EXPECT_EQ(window(224, 7, 2, 3, 3, 1, false), 112);
  EXPECT_EQ(window(3, 3, 5, 0, 0, 1, false), 1); // exactly one window
  EXPECT_EQ(window(1, 1, 1, 0, 0, 1, false), 1);
}

TEST(WindowOutput, CeilMode) {
  // room = 5: floor gives 3 windows, ceil a 4th that starts at 6 < 8.
  EXPECT_EQ(window(8, 3, 2, 0, 0, 1, false), 3);
  EXPECT_EQ(window(8, 3, 2, 0, 0, 1, true), 4);
  // Divisible: ceil and floor agree.
  EXPECT_EQ(window(7, 3, 2, 0, 0, 1, true), 3);
  EXPECT_EQ(window(112, 3, 2, 1, 1, 1, false), 56);
  EXPECT_EQ(window(112, 3, 2, 1, 1, 1, true), 57); // starts at 112 < 112 + 1
  EXPECT_EQ(window(5, 2, 2, 0, 0, 1, true), 3);
}

TEST(WindowOutput, CeilModeLastWindowMustStartInsideInputOrLeadingPad) {
  // in 4, k 2, s 2, trailing pad 1: ceil would add a window starting at 4,
  // entirely in the trailing pad; it is dropped.
  EXPECT_EQ(window(4, 2, 2, 0, 1, 1, false), 2);
  EXPECT_EQ(window(4, 2, 2, 0, 1, 1, true), 2);
  // With a leading pad the same window starts at 4 < 4 + 1: kept.
  EXPECT_EQ(window(4, 2, 2, 1, 1, 1, false), 3);
  EXPECT_EQ(window(4, 2, 2, 1, 1, 1, true), 3);
  EXPECT_EQ(window(4, 2, 2, 1, 0, 1, true), 3);
  // in 6, k 3, s 3, trailing pad 2: room 5, ceil 3 windows, the third starts
  // at 6 == in + padBegin: dropped.
  EXPECT_EQ(window(6, 3, 3, 0, 2, 1, true), 2);
  EXPECT_EQ(window(6, 3, 3, 1, 2, 1, true), 3);
}

TEST(WindowOutput, Dilation) {
  // Kernel 3 with dilation 2 spans 5.
  EXPECT_EQ(window(7, 3, 1, 0, 0, 2, false), 3);
  EXPECT_EQ(window(7, 3, 2, 0, 0, 2, false), 2);
  EXPECT_EQ(window(5, 3, 1, 0, 0, 2, false), 1);
  EXPECT_EQ(window(32, 3, 1, 2, 2, 2, false), 32);
  EXPECT_EQ(window(8, 3, 2, 0, 0, 2, true), 3); // room 3: ceil 3, last starts at 4 < 8
}

TEST(WindowOutput, WindowThatDoesNotFitIsAnError) {
  auto n = shape::windowOutput(2, 3, 1, 0, 0, 1, false);
  ASSERT_FALSE(n);
  EXPECT_EQ(llvm::toString(n.takeError()),
            "window of extent 3 does not fit input of size 2 with pads 0,0");
  // Dilation widens the window past the input.
  auto d = shape::windowOutput(4, 3, 1, 0, 0, 2, true);
  ASSERT_FALSE(d);
  EXPECT_EQ(llvm::toString(d.takeError()),
            "window of extent 5 does not fit input of size 4 with pads 0,0");
  // Pads can make it fit.
  EXPECT_EQ(window(4, 3, 1, 1, 0, 2, false), 1);
  EXPECT_EQ(window(2, 3, 1, 0, 1, 1, false), 1);
}

//===----------------------------------------------------------------------===//
// shape::resolveSlice
//===----------------------------------------------------------------------===//

struct Slice {
  int64_t start, step, count;
  friend bool operator==(const Slice&, const Slice&) = default;
  friend std::ostream& operator<<(std::ostream& os, const Slice& s) {
    return os << "{start " << s.start << ", step " << s.step << ", count " << s.count << "}";
  }
};

Slice slice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  shape::SliceDim s = shape::resolveSlice(dim, start, end, step);
  return {s.start, s.step, s.count};
}

TEST(ResolveSlice, PositiveSteps) {
  EXPECT_EQ(slice(10, 2, 8, 1), (Slice{2, 1, 6}));
  EXPECT_EQ(slice(10, 2, 8, 3), (Slice{2, 3, 2})); // 2, 5
  EXPECT_EQ(slice(10, 2, 9, 3), (Slice{2, 3, 3})); // 2, 5, 8
  EXPECT_EQ(slice(10, 0, 10, 1), (Slice{0, 1, 10}));
  EXPECT_EQ(slice(10, 5, 5, 1), (Slice{5, 1, 0}));
  EXPECT_EQ(slice(10, 7, 3, 1), (Slice{7, 1, 0})); // empty, not negative
  EXPECT_EQ(slice(10, 0, 10, 100), (Slice{0, 100, 1}));
}

TEST(ResolveSlice, NegativeIndicesCountFromTheEnd) {
  EXPECT_EQ(slice(10, -3, 10, 1), (Slice{7, 1, 3}));
  EXPECT_EQ(slice(10, 0, -1, 1), (Slice{0, 1, 9}));
  EXPECT_EQ(slice(10, -4, -2, 1), (Slice{6, 1, 2}));
  EXPECT_EQ(slice(10, -100, 3, 1), (Slice{0, 1, 3})); // clamped to 0
}

TEST(ResolveSlice, ClampingAndHugeBounds) {
  EXPECT_EQ(slice(10, 0, kMax, 1), (Slice{0, 1, 10}));
  EXPECT_EQ(slice(10, -3, kMax, 1), (Slice{7, 1, 3}));
  EXPECT_EQ(slice(10, 20, kMax, 1), (Slice{10, 1, 0}));
  EXPECT_EQ(slice(10, kMin, kMax, 1), (Slice{0, 1, 10}));
  EXPECT_EQ(slice(10, 4, 100, 2), (Slice{4, 2, 3})); // 4, 6, 8
  // A huge step takes one element without overflowing.
  EXPECT_EQ(slice(10, 0, 10, kMax).count, 1);
  EXPECT_EQ(slice(10, 3, kMax, kMax).count, 1);
}

TEST(ResolveSlice, NegativeSteps) {
  // Reverse the whole axis: ONNX spells the end as INT64_MIN.
  EXPECT_EQ(slice(10, -1, kMin, -1), (Slice{9, -1, 10}));
  EXPECT_EQ(slice(10, kMax, kMin, -1), (Slice{9, -1, 10}));
  EXPECT_EQ(slice(10, kMax, 0, -2), (Slice{9, -2, 5})); // 9, 7, 5, 3, 1
  EXPECT_EQ(slice(10, 8, 2, -3), (Slice{8, -3, 2}));    // 8, 5
  EXPECT_EQ(slice(10, 8, 1, -3), (Slice{8, -3, 3}));    // 8, 5, 2
  EXPECT_EQ(slice(10, -2, -5, -1), (Slice{8, -1, 3}));  // 8, 7, 6
  EXPECT_EQ(slice(10, 2, 8, -1).count, 0);
  EXPECT_EQ(slice(10, 3, 3, -1).count, 0);
  EXPECT_EQ(slice(10, 9, -100, -kMax).count, 1);
  EXPECT_EQ(slice(10, 9, kMin, kMin).count, 1);
}

TEST(ResolveSlice, EmptyAxis) {
  EXPECT_EQ(slice(0, 0, 5, 1).count, 0);
  EXPECT_EQ(slice(0, 0, kMax, 1).count, 0);
  EXPECT_EQ(slice(0, -1, kMin, -1).count, 0);
  EXPECT_EQ(slice(0, 0, 0, -1).count, 0);
}

//===----------------------------------------------------------------------===//
// shape::broadcast
//===----------------------------------------------------------------------===//

Shape bcast(const Shape& a, const Shape& b) {
  auto s = shape::broadcast(a, b);
  if (!s) {
    ADD_FAILURE() << llvm::toString(s.takeError());
    return {};
  }
  return *s;
}

TEST(Broadcast, Succeeds) {
  EXPECT_EQ(bcast({2, 3}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(bcast({2, 3}, {3}), (Shape{2, 3}));
  EXPECT_EQ(bcast({3}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(bcast({4, 1, 3}, {2, 1}), (Shape{4, 2, 3}));
  EXPECT_EQ(bcast({1}, {5, 1}), (Shape{5, 1}));
  EXPECT_EQ(bcast({}, {5, 4}), (Shape{5, 4}));
  EXPECT_EQ(bcast({}, {}), (Shape{}));
  EXPECT_EQ(bcast({0}, {1}), (Shape{0}));
  EXPECT_EQ(bcast({1, 3}, {0, 1}), (Shape{0, 3}));
}

TEST(Broadcast, Fails) {
  auto s = shape::broadcast({2, 3}, {4, 3});
  ASSERT_FALSE(s);
  EXPECT_EQ(llvm::toString(s.takeError()), "shapes [2,3] and [4,3] do not broadcast");
  auto t = shape::broadcast({3}, {2, 4});
  ASSERT_FALSE(t);
  EXPECT_EQ(llvm::toString(t.takeError()), "shapes [3] and [2,4] do not broadcast");
  auto z = shape::broadcast({0}, {2});
  ASSERT_FALSE(z);
  llvm::consumeError(z.takeError());
}

} // namespace
