//===- Types.cpp ----------------------------------------------------------===//
#include "ir/Types.h"

namespace lwcc {

namespace {
struct DTypeEntry {
  DType type;
  std::string_view name;
  int64_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::F32, "f32", 4},   {DType::F64, "f64", 8}, {DType::F16, "f16", 2},
    {DType::BF16, "bf16", 2}, {DType::I64, "i64", 8}, {DType::I32, "i32", 4},
    {DType::Bool, "bool", 1},
};
} // namespace

std::string_view dtypeName(DType t) { return kDTypes[static_cast<int>(t)].name; }
int64_t dtypeSize(DType t) { return kDTypes[static_cast<int>(t)].size; }

std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes)
    if (e.name == name)
      return e.type;
  return std::nullopt;
}

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}
bool isInteger(DType t) { return t == DType::I64 || t == DType::I32; }
DType channelDType(DType t) { return is16BitFloat(t) ? DType::F32 : t; }

int64_t TensorType::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeStr(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i)
      out += ',';
    out += std::to_string(s[i]);
  }
  out += ']';
  return out;
}

std::string TensorType::str() const { return std::string(dtypeName(dtype)) + shapeStr(shape); }

} // namespace lwcc
