// emu/EmuTestUtil.h - host vectors to and from the emulated device
// defines: toDevice, toHost
#pragma once

#include <cstddef>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <vector>

namespace lwemu_test {

/// A copy of `h` in new memory of the current device.
template <typename T> T* toDevice(const std::vector<T>& h) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, h.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(p);
}

/// The `n` elements at `d` on the host.
template <typename T> std::vector<T> toHost(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

} // namespace lwemu_test
