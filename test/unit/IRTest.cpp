#include <gtest/gtest.h>

#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

using namespace lwcc;

TEST(IR, Smoke) {
  auto g = parseGraph("graph @g(%x: f32[2,3] @data) {\n  %y = relu(%x) : f32[2,3]\n  return %y\n}\n");
  ASSERT_TRUE(!!g) << llvm::toString(g.takeError());
  EXPECT_FALSE(verifyGraph(**g));
}
