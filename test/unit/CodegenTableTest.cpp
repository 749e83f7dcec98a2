// The op table names a runtime call for every op, and codegen can write
// each: an op that a trainer cannot run is found here, not when a model
// that uses it is compiled.
#include "codegen/Emitters.h"
#include "ir/OpTable.h"

#include <gtest/gtest.h>

#include <string>

namespace lwcc {
namespace {

TEST(CodegenTable, EveryOpHasARuntimeCall) {
  for (const OpInfo& info : allOps()) {
    SCOPED_TRACE(std::string(info.mnemonic));
    ASSERT_NE(info.kernel.fn, nullptr);
    EXPECT_NE(std::string(info.kernel.fn), "");
    const KernelSpec::Args a = info.kernel.args;
    bool takesParams = a == KernelSpec::Plain || a == KernelSpec::OptionalLast ||
                       a == KernelSpec::OperandList || a == KernelSpec::ResultList;
    EXPECT_EQ(codegen::paramsFormatters().count(info.kind), takesParams ? 1u : 0u);
    EXPECT_EQ(a == KernelSpec::Comm, info.isCommunication());
    EXPECT_EQ(a == KernelSpec::Event, info.isEvent());
  }
}

TEST(CodegenTable, OptionalLastKernelsHaveAnOptionalOperand) {
  for (const OpInfo& info : allOps())
    if (info.kernel.args == KernelSpec::OptionalLast) {
      SCOPED_TRACE(std::string(info.mnemonic));
      EXPECT_EQ(info.maxOperands, info.minOperands + 1);
    }
}

} // namespace
} // namespace lwcc
