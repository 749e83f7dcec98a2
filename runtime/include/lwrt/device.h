// lwrt/device.h - devices, memory, streams and events
// defines: Event, Stream, Device, Backend, createCpuBackend
//
// One interface for every backend. Work goes to a stream and runs in the
// order it was launched there; streams run concurrently with each other.
// An event marks a point in a stream (record); another stream that waits on
// it runs its later work only after that point. Nothing else synchronizes:
// a cross-stream dependency without an event is a race. The CPU backend runs
// each stream on a worker thread of its own, so such races are real there
// too, and N logical devices share the host.
#pragma once

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

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int numDevices() const = 0;
  virtual Device& device(int index) = 0;
};

/// `numDevices` emulated devices on the host.
std::unique_ptr<Backend> createCpuBackend(int numDevices);

} // namespace lwrt
