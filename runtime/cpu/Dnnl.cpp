// cpu/Dnnl.cpp - the per-thread oneDNN context, kernel cache and scratch (Dnnl.h)
#include "Dnnl.h"

#include <cstdlib>
#include <new>

namespace lwrt::cpu::detail {

DnnlContext& dnnlContext() {
  thread_local DnnlContext context;
  return context;
}

std::unordered_map<Key, std::unique_ptr<Prepared>, KeyHash>& preparedKernels() {
  thread_local std::unordered_map<Key, std::unique_ptr<Prepared>, KeyHash> cache;
  return cache;
}

namespace {

struct Scratch {
  unsigned char* data = nullptr;
  size_t bytes = 0;
  ~Scratch() { std::free(data); }
};

} // namespace

unsigned char* scratch(size_t bytes) {
  thread_local Scratch s;
  if (bytes > s.bytes) {
    // Grown to the largest need seen: kernels only ask for more during
    // the first step, when each prepares.
    size_t want = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, want);
    if (!p)
      throw std::bad_alloc();
    std::free(s.data);
    s.data = static_cast<unsigned char*>(p);
    s.bytes = want;
  }
  return s.data;
}

void Operand::plan(const dnnl::memory::desc& userDesc, const dnnl::memory::desc& wantDesc,
                   bool input, ScratchPlan& plan) {
  const dnnl::engine& engine = dnnlContext().engine;
  user = dnnl::memory(userDesc, engine, nullptr);
  if (userDesc == wantDesc) {
    want = user;
    return;
  }
  want = dnnl::memory(wantDesc, engine, nullptr);
  at = plan.add(wantDesc.get_size());
  if (input)
    toWant = dnnl::reorder(user, want);
  else
    toUser = dnnl::reorder(want, user);
}

void Operand::bind(void* data, unsigned char* base, dnnl::stream& s) {
  user.set_data_handle(data);
  if (want.get() == user.get())
    return;
  want.set_data_handle(base + at);
  if (toWant)
    toWant->execute(s, user, want);
}

void Operand::finish(dnnl::stream& s) {
  if (toUser)
    toUser->execute(s, want, user);
}

} // namespace lwrt::cpu::detail
