// lwrt/device.h - devices, memory, streams and events
// defines: Event, Stream, Device, CollectiveBuffers, Backend, createCpuBackend
//
// One interface for every backend. Work goes to a stream and runs in the
// order it was launched there; streams run concurrently with each other.
// An event marks a point in a stream (record); another stream that waits on
// it runs its later work only after that point. Nothing else synchronizes:
// a cross-stream dependency without an event is a race. The CPU backend runs
// each stream on a worker thread of its own, so such races are real there
// too, and N logical devices share the host.
#pragma once

#include "lwrt/tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lwrt {

class Event {
public:
  virtual ~Event() = default;
};

class Stream {
public:
  virtual ~Stream() = default;
  /// Enqueues `work`; it runs after all work launched earlier on this stream.
  virtual void launch(std::function<void()> work) = 0;
  /// `event` completes when the work launched so far on this stream has run.
  virtual void record(Event& event) = 0;
  /// Work launched later on this stream waits for the most recent record of
  /// `event` (made before this call) to complete. Without a record it waits
  /// for nothing, as a CUDA event that was never recorded.
  virtual void wait(Event& event) = 0;
  /// Blocks the calling thread until all launched work has run. Returns the
  /// first error that work reported (an exception's message), or "".
  virtual std::string synchronize() = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual int index() const = 0;
  /// Device memory, aligned to 256 bytes; null when it cannot be had.
  virtual void* allocate(int64_t bytes) = 0;
  virtual void release(void* memory) = 0;
  virtual std::unique_ptr<Stream> createStream() = 0;
  virtual std::unique_ptr<Event> createEvent() = 0;
  /// Copies on `stream`, ordered with the work launched there.
  virtual void copyFromHost(void* dst, const void* src, int64_t bytes, Stream& stream) = 0;
  virtual void copyToHost(void* dst, const void* src, int64_t bytes, Stream& stream) = 0;
};

/// A collective operation over one buffer per device. Each participant's
/// part is launched on that device's stream and runs in its order there
/// (as NCCL's kernels do): the operation completes on every stream once
/// every participant has reached it.
struct CollectiveBuffers {
  std::vector<TensorView> buffers; ///< one per device, same dtype and shape
  std::vector<Stream*> streams;    ///< the stream of each buffer's device
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int numDevices() const = 0;
  virtual Device& device(int index) = 0;
  /// Every buffer becomes the elementwise sum of all (F32 or F64). False,
  /// launching nothing, when the buffers do not fit together.
  virtual bool allReduceSum(const CollectiveBuffers& c) = 0;
  /// Every buffer becomes a copy of buffers[root].
  virtual bool broadcast(const CollectiveBuffers& c, int root) = 0;
};

/// `numDevices` emulated devices on the host.
std::unique_ptr<Backend> createCpuBackend(int numDevices);

} // namespace lwrt
