// TensorBoard event files (--tensorboard=DIR): the step and evaluation
// records of the JSONL log as scalar summaries, written without TensorFlow
// or protobuf.
#pragma once

#include "lwrt/progress.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

namespace lwrt {

/// One event file, DIR/events.out.tfevents.<seconds>.<host>.<pid>.lwcc: a
/// TFRecord stream (each record its length, the length's masked CRC-32C,
/// the bytes and their masked CRC-32C) of Event protos encoded by hand, the
/// first holding file_version "brain.Event:2", then one per record with
/// its scalars as Summary.Value{tag, simple_value} (float32) at the
/// record's step: train/loss, train/lr, train/grad_norm, train/loss_scale,
/// train/img_per_s; eval/accuracy, eval/top5, eval/loss. Each event is
/// flushed as written, so TensorBoard follows a run as it trains; a
/// resumed run writes a new file beside the old ones.
class TensorBoardWriter {
public:
  /// Creates DIR when missing and a new event file in it; null with `error`.
  static std::unique_ptr<TensorBoardWriter> open(const std::string& dir, std::string& error);
  ~TensorBoardWriter();
  void step(const StepRecord& r);
  void eval(const EvalRecord& r);
  /// False once a write failed.
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }

private:
  TensorBoardWriter(FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  void write(const std::string& event);
  FILE* f_;
  std::string path_;
  bool ok_ = true;
};

/// CRC-32C (Castagnoli) of `n` bytes, and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t maskedCrc32c(const void* data, size_t n);

} // namespace lwrt
