// lwrt/tensor.h - tensors as the runtime sees them
// defines: DType, Layout, TensorView, dtypeSize, dtypeName
//
// The runtime is the library compiled into every trainer that lwcc emits.
// It knows nothing of the compiler's IR: kernels take TensorViews (a pointer
// into a device arena, an element type and a static shape) and plain
// parameter structs whose fields mirror the IR op's attributes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lwrt {

/// The element types, in the order of lwcc's IR (ir/Types.h).
enum class DType : uint8_t { F32, F64, F16, BF16, I64, I32, Bool };

inline int64_t dtypeSize(DType t) {
  switch (t) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::Bool:
    return 1;
  }
  return 0;
}

/// numpy's name of the type, as the data loaders' messages write it.
inline const char* dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "float32";
  case DType::F64:
    return "float64";
  case DType::F16:
    return "float16";
  case DType::BF16:
    return "bfloat16";
  case DType::I64:
    return "int64";
  case DType::I32:
    return "int32";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

/// How a view's elements lie in memory. RowMajor is the IR's (and every
/// backend's) layout; the CPU backend also keeps some float [N, C, H, W]
/// activations, C a multiple of 8, in oneDNN's nChw8c, [N][C/8][H][W][8]
/// (codegen/Layouts.h decides which), and its kernels that take that layout
/// say so (lwrt/cpu_nn.h); the others refuse it.
enum class Layout : uint8_t { RowMajor, NChw8c };

/// A view of a dense tensor owned by someone else (an arena).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  Layout layout = Layout::RowMajor;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  int64_t bytes() const { return numel() * dtypeSize(dtype); }
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

} // namespace lwrt
