//===- Names.h - The C identifiers of a generated trainer -------*- C++ -*-===//
//
// A trainer's source names its values after the model:
//  1. a value's view (a local of each function that uses it) takes the
//     value's name: the ONNX tensor or initializer name the frontend kept,
//     or the one a pass gave (fc1_weight_grad, features_3_d0); a value with
//     no name (or a number for a name) is named after what computed it: the
//     param an update writes (conv1_bias_new), else the ONNX node of its op
//     and the op (fc3_gemm, relu4_relu_grad), with its device in a step of
//     several (_d1) and its micro-batch (_mb0);
//  2. names become C identifiers (other characters become '_'), a name the
//     source already uses (a runtime function, a keyword, a type or macro
//     spelling) takes a "v_" prefix, and a name taken twice a "_2" suffix;
//  3. the value's offset in its buffer is the constant <name>_off, unique in
//     the whole source (the evaluation pass's start with "eval_");
//  4. each distinct shape is one constant, kShape1x6x28x28 (kScalar).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace lwcc::codegen {

/// `s` as a C identifier: other characters as one '_', none leading or
/// trailing; "" when nothing is left.
std::string identifier(const std::string& s);

/// The names of one graph's values in a trainer's source.
class Names {
public:
  /// `taken` holds the offset constants of the whole source (every Names of
  /// it shares one); `constantPrefix` starts this graph's constants.
  /// `devices`: the graph runs on several devices (or streams), so a name
  /// made from an op says its device.
  Names(std::set<std::string>& taken, std::string constantPrefix, bool devices)
      : taken_(taken), prefix_(std::move(constantPrefix)), devices_(devices) {}

  /// The name of `v`'s view.
  const std::string& operator()(const Value* v) { return entry(v).local; }
  /// The constant that holds `v`'s offset in its buffer.
  const std::string& offset(const Value* v) { return entry(v).offset; }

private:
  struct Entry {
    std::string local, offset;
  };
  const Entry& entry(const Value* v);

  std::set<std::string>& taken_;
  std::string prefix_;
  bool devices_;
  std::map<const Value*, Entry> names_;
  std::set<std::string> used_; ///< this graph's locals and constants
};

/// The shape constants of a trainer's source (`const Shape kShape2x3 = {2,
/// 3};`), one per distinct shape.
class ShapeNames {
public:
  /// The constant of `shape`.
  std::string operator()(const std::vector<int64_t>& shape);
  /// Their definitions, one a line, each after `prefix` ("inline " where
  /// several files include them).
  std::string definitions(const std::string& prefix = "") const;

private:
  std::map<std::vector<int64_t>, std::string> names_;
};

} // namespace lwcc::codegen
