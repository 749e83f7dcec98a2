//===- ShardLayout.h - A value's pieces on devices -----------*- C++ -*-===//
//
// The layouts of passes/Materialize.cpp: a value whole on each device, split
// along one dim, or a partial sum, and the splits of a dim over devices.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lwcc::shard {

/// How a logical value is spread over devices: piece i lives on devices[i].
/// Split: piece i holds sizes[i] entries of `dim` from offsets[i]. Whole:
/// every piece is the whole value. Partial: every piece has the whole
/// value's shape and the value is their sum.
struct Layout {
  std::vector<int64_t> devices;
  int64_t dim = -1;
  std::vector<int64_t> offsets, sizes;
  bool partial = false;

  bool isSplit() const { return dim >= 0; }
  bool isWhole() const { return dim < 0 && !partial; }
  std::string key() const {
    // Appended piece by piece: GCC 12's -O3 misreads `"s" + std::string`
    // (a -Wrestrict false positive).
    std::string k(1, partial ? 'p' : isSplit() ? 's' : 'w');
    if (isSplit())
      k += std::to_string(dim);
    for (size_t i = 0; i < devices.size(); ++i) {
      k += ':';
      k += std::to_string(devices[i]);
      if (isSplit()) {
        k += '@';
        k += std::to_string(offsets[i]);
        k += '+';
        k += std::to_string(sizes[i]);
      }
    }
    return k;
  }
};

inline Layout wholeOn(std::vector<int64_t> devices) {
  Layout l;
  l.devices = std::move(devices);
  return l;
}

/// `sizes` entries of `dim` per device, in order.
inline Layout splitSized(int64_t dim, std::vector<int64_t> devices,
                         const std::vector<int64_t>& sizes) {
  Layout l;
  l.dim = dim;
  int64_t off = 0;
  for (int64_t size : sizes) {
    l.offsets.push_back(off);
    l.sizes.push_back(size);
    off += size;
  }
  l.devices = std::move(devices);
  return l;
}

/// `total` entries of `dim` split as evenly as possible, the first devices
/// taking one more when the split is uneven.
inline Layout splitEven(int64_t dim, std::vector<int64_t> devices, int64_t total) {
  Layout l;
  l.dim = dim;
  int64_t p = static_cast<int64_t>(devices.size()), off = 0;
  for (int64_t i = 0; i < p; ++i) {
    int64_t size = total / p + (i < total % p ? 1 : 0);
    l.offsets.push_back(off);
    l.sizes.push_back(size);
    off += size;
  }
  l.devices = std::move(devices);
  return l;
}

} // namespace lwcc::shard
