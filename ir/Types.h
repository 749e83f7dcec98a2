//===- Types.h - Element types and static tensor types ---------*- C++ -*-===//
//
// lwcc tensors have a static shape and one element type. A TensorType with an
// empty shape is a scalar.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lwcc {

enum class DType : uint8_t { F32, F64, F16, BF16, I64, I32, Bool };

/// The spelling used by the text form: f32, f64, f16, bf16, i64, i32, bool.
std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
/// Size of one element in bytes.
int64_t dtypeSize(DType t);
bool isFloat(DType t);
bool isInteger(DType t);
/// bf16 or fp16: mixed precision's 16-bit types.
inline bool is16BitFloat(DType t) { return t == DType::BF16 || t == DType::F16; }
/// The type of a normalization's per-channel values (scale, bias, mean,
/// variance) for activations of type `t`: float32 for bf16 and fp16 (mixed
/// precision keeps them float32, as autocast does), `t` otherwise.
DType channelDType(DType t);

using Shape = std::vector<int64_t>;

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;

  TensorType() = default;
  TensorType(DType t, Shape s) : dtype(t), shape(std::move(s)) {}

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  /// Number of elements; 1 for a scalar.
  int64_t numElements() const;
  int64_t sizeInBytes() const { return numElements() * dtypeSize(dtype); }
  /// The text form, e.g. "f32[32,1,28,28]" or "i64[]".
  std::string str() const;

  friend bool operator==(const TensorType&, const TensorType&) = default;
};

/// "[2,3,4]"
std::string shapeStr(const Shape& s);

} // namespace lwcc
