//===- TestUtil.h - Helpers shared by the lwcc unit tests ------*- C++ -*-===//
#pragma once

#include "ir/IR.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include <gtest/gtest.h>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace lwcc {
/// Prints a Use in gtest failure messages.
inline void PrintTo(const Use& u, std::ostream* os) {
  if (u.user)
    *os << "{'" << u.user->mnemonic() << "' op " << static_cast<const void*>(u.user) << ", #"
        << u.index << "}";
  else
    *os << "{output #" << u.index << "}";
}
} // namespace lwcc

namespace lwcc::test {

inline TensorType f32(Shape s) { return TensorType(DType::F32, std::move(s)); }
inline TensorType i64(Shape s) { return TensorType(DType::I64, std::move(s)); }

/// Parses `text`; a parse error is a test failure and yields null.
inline std::unique_ptr<Graph> parseOk(std::string_view text, std::string_view name = "<test>") {
  auto g = parseGraph(text, name);
  if (!g) {
    ADD_FAILURE() << "parse failed: " << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}

/// What an llvm::Error holds: its full text, and for the first LocatedError
/// inside it, the location and the message without the location.
struct ErrorParts {
  bool failed = false;
  std::string full;
  bool located = false;
  Location loc;
  std::string text;
};

inline ErrorParts inspect(llvm::Error err) {
  ErrorParts p;
  if (!err)
    return p;
  p.failed = true;
  std::vector<std::string> parts;
  llvm::handleAllErrors(
      std::move(err),
      [&](const LocatedError& e) {
        if (!p.located) {
          p.located = true;
          p.loc = e.loc();
          p.text = e.text();
        }
        parts.push_back(e.loc().str() + ": " + e.text());
      },
      [&](const llvm::ErrorInfoBase& e) { parts.push_back(e.message()); });
  for (size_t i = 0; i < parts.size(); ++i)
    p.full += (i ? "\n" : "") + parts[i];
  return p;
}

/// The error's text ("" on success), consuming it.
inline std::string errorText(llvm::Error err) {
  if (!err)
    return "";
  return llvm::toString(std::move(err));
}

/// The ops of `g` in order.
inline std::vector<Op*> opList(const Graph& g) {
  std::vector<Op*> ops;
  for (const auto& op : g.ops())
    ops.push_back(op.get());
  return ops;
}

/// Asserts that `g` fails verification at `op`: a LocatedError at the op's
/// location whose message names the op and contains `phrase`.
inline void expectOpError(const Graph& g, const Op* op, const std::string& phrase) {
  std::vector<Location> locs;
  std::vector<std::string> texts;
  llvm::Error err = verifyGraph(g);
  ASSERT_TRUE(!!err) << "expected an error containing: " << phrase;
  llvm::Error rest = llvm::handleErrors(std::move(err), [&](const LocatedError& e) {
    locs.push_back(e.loc());
    texts.push_back(e.text());
  });
  ASSERT_FALSE(rest) << "not a LocatedError: " << llvm::toString(std::move(rest));
  ASSERT_EQ(texts.size(), 1u);
  EXPECT_EQ(locs[0].str(), op->loc().str());
  EXPECT_EQ(locs[0].name, op->loc().name);
  std::string prefix = op->describe() + ": ";
  EXPECT_EQ(texts[0].rfind(prefix, 0), 0u) << texts[0];
  std::string quoted = "'";
  quoted += op->mnemonic();
  quoted += "' op";
  EXPECT_NE(texts[0].find(quoted), std::string::npos);
  EXPECT_NE(texts[0].find(phrase), std::string::npos) << texts[0];
}

/// The same for errors located at a graph input or param.
inline void expectValueError(const Graph& g, const Value* v, const std::string& text) {
  ErrorParts e = inspect(verifyGraph(g));
  ASSERT_TRUE(e.failed) << "expected: " << text;
  ASSERT_TRUE(e.located) << e.full;
  EXPECT_EQ(e.loc.str(), v->loc().str());
  EXPECT_EQ(e.text, text);
}

inline Location at(unsigned line, std::string name = "") {
  return Location{"v.lwir", line, 3, std::move(name)};
}

} // namespace lwcc::test
