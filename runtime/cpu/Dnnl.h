// cpu/Dnnl.h - oneDNN under the CPU kernels (not installed)
// defines: DnnlContext, dnnlContext, Key, Prepared, prepared, scratch, ScratchPlan, Operand
//
// oneDNN (Debian's libdnnl, its v2 API) runs the convolutions. A primitive
// and its memory descriptors are made once per shape: each thread that runs
// kernels keeps the kernels it prepared in a cache keyed by everything that
// decides them (the kernel, shapes, attributes, the thread's team size), so
// a trainer makes them during its first step and reuses them afterwards,
// with nothing to set up at start-up and nothing shared between threads.
// Primitives take their scratchpad from the thread's scratch memory, which
// grows during the first step and then stays; reorders between the arena's
// plain layouts and the blocked layouts a primitive wants go through it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

namespace lwrt::cpu::detail {

/// The calling thread's oneDNN engine and in-order stream.
struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};
DnnlContext& dnnlContext();

/// What decides a prepared kernel; its first element names the kernel.
using Key = std::vector<int64_t>;
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k)
      h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

/// A prepared kernel, as the cache holds it.
struct Prepared {
  virtual ~Prepared() = default;
  bool ok = false; ///< false: oneDNN would not take it (the kernel falls back)
};

/// The calling thread's prepared kernels.
std::unordered_map<Key, std::unique_ptr<Prepared>, KeyHash>& preparedKernels();

/// The entry for `key` on the calling thread; the first time, make() fills
/// a new one (an exception from oneDNN leaves it not ok).
template <typename Entry, typename Make> Entry& prepared(const Key& key, Make make) {
  auto& cache = preparedKernels();
  auto it = cache.find(key);
  if (it != cache.end())
    return static_cast<Entry&>(*it->second);
  auto entry = std::make_unique<Entry>();
  try {
    make(*entry);
    entry->ok = true;
  } catch (const dnnl::error&) {
    entry->ok = false;
  }
  return static_cast<Entry&>(*cache.emplace(key, std::move(entry)).first->second);
}

/// The calling thread's scratch memory, at least `bytes`, 64-byte aligned,
/// valid until its next call on this thread.
unsigned char* scratch(size_t bytes);

/// Offsets of a kernel's pieces of scratch, each 64-byte aligned.
class ScratchPlan {
public:
  size_t add(size_t bytes) {
    size_t at = total_;
    total_ += (bytes + 63) / 64 * 64;
    return at;
  }
  size_t total() const { return total_; }

private:
  size_t total_ = 0;
};

/// One tensor argument of a primitive: the layout of the view (plain, in
/// the arena) and the layout the primitive wants. When they differ, the
/// primitive reads or writes a copy in scratch and a reorder converts.
struct Operand {
  dnnl::memory user, want;
  std::optional<dnnl::reorder> toWant, toUser;
  size_t at = 0; ///< the copy's offset in the kernel's scratch

  /// Plans the operand: `user` as the view's layout, `want` the primitive's.
  void plan(const dnnl::memory::desc& userDesc, const dnnl::memory::desc& wantDesc, bool input,
            ScratchPlan& plan);
  /// Points the operand at `data` and the kernel's scratch `base`; an input
  /// is reordered into its copy here.
  void bind(void* data, unsigned char* base, dnnl::stream& s);
  /// An output: its copy, reordered back into the view.
  void finish(dnnl::stream& s);
};

} // namespace lwrt::cpu::detail
