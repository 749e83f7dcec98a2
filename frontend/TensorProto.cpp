//===- TensorProto.cpp - ONNX tensors to and from lwcc tensors ------------===//
#include "frontend/Frontend.h"
#include "onnx/onnx_pb.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstring>
#include <filesystem>
#include <fstream>

namespace lwcc {

namespace fs = std::filesystem;

std::optional<DType> dtypeFromOnnx(int t) {
  switch (t) {
  case onnx::TensorProto::FLOAT:
    return DType::F32;
  case onnx::TensorProto::DOUBLE:
    return DType::F64;
  case onnx::TensorProto::FLOAT16:
    return DType::F16;
  case onnx::TensorProto::BFLOAT16:
    return DType::BF16;
  case onnx::TensorProto::INT64:
    return DType::I64;
  case onnx::TensorProto::INT32:
    return DType::I32;
  case onnx::TensorProto::BOOL:
    return DType::Bool;
  default:
    return std::nullopt;
  }
}

int dtypeToOnnx(DType t) {
  switch (t) {
  case DType::F32:
    return onnx::TensorProto::FLOAT;
  case DType::F64:
    return onnx::TensorProto::DOUBLE;
  case DType::F16:
    return onnx::TensorProto::FLOAT16;
  case DType::BF16:
    return onnx::TensorProto::BFLOAT16;
  case DType::I64:
    return onnx::TensorProto::INT64;
  case DType::I32:
    return onnx::TensorProto::INT32;
  case DType::Bool:
    return onnx::TensorProto::BOOL;
  }
  return onnx::TensorProto::UNDEFINED;
}

namespace {

double halfToDouble(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(mant + 1024, exp - 25);
  return sign ? -v : v;
}

double bf16ToDouble(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t doubleToHalf(double d) {
  float f = static_cast<float>(d);
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31)
    return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    uint32_t shift = 14 - exp;
    uint32_t half = mant >> shift;
    if ((mant >> (shift - 1)) & 1)
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (exp << 10) | (mant >> 13);
  if (mant & 0x1000)
    ++half; // round half up; exact ties are rare in test data
  return static_cast<uint16_t>(half);
}

} // namespace

namespace {

/// Where a tensor's external data lies: checked as readExternalData says.
struct ExternalRange {
  fs::path file;
  std::string location;
  int64_t offset = 0, length = 0;
};

llvm::Expected<ExternalRange> externalRange(const onnx::TensorProto& t, const std::string& modelDir,
                                            const std::string& what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    auto number = [&](int64_t& out) -> bool {
      try {
        size_t used = 0;
        out = std::stoll(kv.value(), &used);
        return used == kv.value().size() && out >= 0;
      } catch (...) {
        return false;
      }
    };
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset" && !number(offset))
      return makeError(what + ": external data offset '" + kv.value() + "' is not a valid size");
    else if (kv.key() == "length" && !number(length))
      return makeError(what + ": external data length '" + kv.value() + "' is not a valid size");
  }
  if (location.empty())
    return makeError(what + ": external data has no location");
  fs::path rel(location);
  if (rel.is_absolute())
    return makeError(what + ": external data location '" + location +
                     "' is an absolute path; it must be relative to the model's folder");
  for (const auto& part : rel)
    if (part == "..")
      return makeError(what + ": external data location '" + location +
                       "' contains '..'; it must stay inside the model's folder");
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(modelDir.empty() ? "." : modelDir), ec);
  fs::path file = fs::weakly_canonical(base / rel, ec);
  if (ec || !fs::exists(file))
    return makeError(what + ": external data file '" + location + "' does not exist");
  // Links may point anywhere: the resolved file must still be inside.
  auto mismatch = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
  if (mismatch.first != base.end())
    return makeError(what + ": external data file '" + location +
                     "' resolves outside the model's folder");
  if (!fs::is_regular_file(file))
    return makeError(what + ": external data '" + location + "' is not a regular file");
  int64_t size = static_cast<int64_t>(fs::file_size(file, ec));
  if (ec)
    return makeError(what + ": cannot stat external data file '" + location + "'");
  if (offset > size)
    return makeError(llvm::formatv("{0}: external data offset {1} is past the end of '{2}' ({3} "
                                   "bytes)",
                                   what, offset, location, size)
                         .str());
  if (length < 0)
    length = size - offset;
  if (length > size - offset)
    return makeError(llvm::formatv("{0}: external data range [{1}, {1}+{2}) is past the end of "
                                   "'{3}' ({4} bytes)",
                                   what, offset, length, location, size)
                         .str());
  return ExternalRange{file, location, offset, length};
}

/// A TensorProto's element type and shape, checked; with its element count
/// and the bytes of one element in raw data.
struct ProtoLayout {
  TensorType type;
  int64_t n = 0, elemBytes = 0;
};

llvm::Expected<ProtoLayout> layoutOf(const onnx::TensorProto& t, const std::string& what) {
  std::optional<DType> dt = dtypeFromOnnx(t.data_type());
  if (!dt)
    return makeError(what + ": element type " + std::to_string(t.data_type()) +
                     " is not supported (float, double, float16, bfloat16, int64, int32, bool)");
  Shape shape;
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  // Zero dims are left out of the bound (as the IR parser does): strides and
  // other partial products of the shape must not wrap either.
  int64_t n = 1, nonzero = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return makeError(what + ": negative dimension " + std::to_string(d));
    if (d != 0 && nonzero > kMaxElements / d)
      return makeError(what + ": shape is too large");
    if (d != 0)
      nonzero *= d;
    n *= d;
    shape.push_back(d);
  }
  return ProtoLayout{TensorType(*dt, shape), n, *dt == DType::Bool ? 1 : dtypeSize(*dt)};
}

/// The count of `t`'s values in its typed fields (no raw or external data).
int64_t typedValues(const onnx::TensorProto& t, DType dt) {
  switch (dt) {
  case DType::F32:
    return t.float_data_size();
  case DType::F64:
    return t.double_data_size();
  case DType::I64:
    return t.int64_data_size();
  case DType::F16:
  case DType::BF16:
  case DType::I32:
  case DType::Bool:
    return t.int32_data_size();
  }
  return 0;
}

/// layoutOf, with the bytes of `t`'s raw or external data (found, not
/// read) or the count of its typed values checked against it: before any
/// of it is read or allocated, since the dims alone may claim terabytes.
llvm::Expected<ProtoLayout> checkedLayout(const onnx::TensorProto& t, const std::string& modelDir,
                                          const std::string& what,
                                          std::optional<int64_t> unreadBytes = std::nullopt) {
  auto layout = layoutOf(t, what);
  if (!layout)
    return layout.takeError();
  int64_t bytes = -1;
  if (unreadBytes) {
    bytes = *unreadBytes;
  } else if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    auto range = externalRange(t, modelDir, what);
    if (!range)
      return range.takeError();
    bytes = range->length;
  } else if (t.has_raw_data()) {
    bytes = static_cast<int64_t>(t.raw_data().size());
  }
  if (bytes >= 0 && bytes != layout->n * layout->elemBytes)
    return makeError(llvm::formatv("{0}: raw data has {1} bytes, but {2} needs {3}", what, bytes,
                                   layout->type.str(), layout->n * layout->elemBytes)
                         .str());
  if (int64_t have = typedValues(t, layout->type.dtype); bytes < 0 && have != layout->n)
    return makeError(llvm::formatv("{0}: holds {1} values, but {2} needs {3}", what, have,
                                   layout->type.str(), layout->n)
                         .str());
  return layout;
}

} // namespace

llvm::Expected<std::string> readExternalData(const onnx::TensorProto& t,
                                             const std::string& modelDir, const std::string& what) {
  auto range = externalRange(t, modelDir, what);
  if (!range)
    return range.takeError();
  std::ifstream in(range->file, std::ios::binary);
  std::string data(range->length, '\0');
  in.seekg(range->offset);
  in.read(data.data(), range->length);
  if (!in)
    return makeError(what + ": cannot read external data from '" + range->location + "'");
  return data;
}

llvm::Expected<TensorType> tensorTypeFromProto(const onnx::TensorProto& t,
                                               const std::string& modelDir, const std::string& what,
                                               std::optional<int64_t> unreadRawBytes) {
  auto layout = checkedLayout(t, modelDir, what, unreadRawBytes);
  if (!layout)
    return layout.takeError();
  return layout->type;
}

llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto& t, const std::string& modelDir,
                                       const std::string& what) {
  auto layout = checkedLayout(t, modelDir, what);
  if (!layout)
    return layout.takeError();
  const TensorType& type = layout->type;
  const DType dt = type.dtype;
  const int64_t n = layout->n, elemBytes = layout->elemBytes;

  std::string external;
  const std::string* raw = nullptr;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    auto data = readExternalData(t, modelDir, what);
    if (!data)
      return data.takeError();
    external = std::move(*data);
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
  }

  if (raw) { // of the size checked
    Tensor out(type);
    const char* p = raw->data();
    for (int64_t k = 0; k < n; ++k, p += elemBytes) {
      switch (dt) {
      case DType::F32: {
        float v;
        std::memcpy(&v, p, 4);
        out.f[k] = v;
        break;
      }
      case DType::F64:
        std::memcpy(&out.f[k], p, 8);
        break;
      case DType::F16:
      case DType::BF16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out.f[k] = dt == DType::F16 ? halfToDouble(v) : bf16ToDouble(v);
        break;
      }
      case DType::I64:
        std::memcpy(&out.i[k], p, 8);
        break;
      case DType::I32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        out.i[k] = v;
        break;
      }
      case DType::Bool:
        out.i[k] = *p != 0;
        break;
      }
    }
    return out;
  }

  // Typed fields (their count checked).
  Tensor out(type);
  switch (dt) {
  case DType::F32:
    for (int64_t k = 0; k < n; ++k)
      out.f[k] = t.float_data(k);
    break;
  case DType::F64:
    for (int64_t k = 0; k < n; ++k)
      out.f[k] = t.double_data(k);
    break;
  case DType::F16:
  case DType::BF16:
    for (int64_t k = 0; k < n; ++k)
      out.f[k] = dt == DType::F16 ? halfToDouble(static_cast<uint16_t>(t.int32_data(k)))
                                  : bf16ToDouble(static_cast<uint16_t>(t.int32_data(k)));
    break;
  case DType::I64:
    for (int64_t k = 0; k < n; ++k)
      out.i[k] = t.int64_data(k);
    break;
  case DType::I32:
  case DType::Bool:
    for (int64_t k = 0; k < n; ++k)
      out.i[k] = dt == DType::Bool ? t.int32_data(k) != 0 : t.int32_data(k);
    break;
  }
  return out;
}

llvm::Expected<Tensor> readTensorFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return makeError(path + ": cannot open");
  onnx::TensorProto t;
  if (!t.ParseFromIstream(&in))
    return makeError(path + ": not a valid ONNX TensorProto");
  std::string dir = fs::path(path).parent_path().string();
  return tensorFromProto(t, dir, path);
}

llvm::Error writeTensorFile(const Tensor& t, const std::string& name, const std::string& path) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(dtypeToOnnx(t.type.dtype));
  for (int64_t d : t.type.shape)
    p.add_dims(d);
  std::string raw;
  int64_t n = t.size();
  int64_t elemBytes = t.type.dtype == DType::Bool ? 1 : dtypeSize(t.type.dtype);
  raw.resize(n * elemBytes);
  char* q = raw.data();
  for (int64_t k = 0; k < n; ++k, q += elemBytes) {
    switch (t.type.dtype) {
    case DType::F32: {
      float v = static_cast<float>(t.f[k]);
      std::memcpy(q, &v, 4);
      break;
    }
    case DType::F64:
      std::memcpy(q, &t.f[k], 8);
      break;
    case DType::F16: {
      uint16_t v = doubleToHalf(t.f[k]);
      std::memcpy(q, &v, 2);
      break;
    }
    case DType::BF16: {
      float f = static_cast<float>(t.f[k]);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t v = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
      std::memcpy(q, &v, 2);
      break;
    }
    case DType::I64:
      std::memcpy(q, &t.i[k], 8);
      break;
    case DType::I32: {
      int32_t v = static_cast<int32_t>(t.i[k]);
      std::memcpy(q, &v, 4);
      break;
    }
    case DType::Bool:
      *q = t.i[k] != 0;
      break;
    }
  }
  p.set_raw_data(raw);
  std::ofstream out(path, std::ios::binary);
  if (!out || !p.SerializeToOstream(&out))
    return makeError(path + ": cannot write");
  return llvm::Error::success();
}

} // namespace lwcc
