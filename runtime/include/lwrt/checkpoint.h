// lwrt/checkpoint.h - versioned, checksummed training checkpoints
// defines: CheckpointState, CheckpointTensor, Checkpoint, NamedTensor, kCheckpointVersion,
//          kFnv1aOffset, fnv1a64, writeCheckpoint, readCheckpoint, checkpointFileName,
//          listCheckpoints, latestCheckpoint, keepLastCheckpoints
//
// A checkpoint holds everything a trainer needs to resume bit-exactly: the
// fingerprint of the model it belongs to, the step counter, the RNG state
// (opaque bytes), the data position (epoch, batch in the epoch) and named
// tensors (weights and optimizer state) as raw bytes.
//
// File layout, all integers little-endian:
//   "LWCCCKPT"                          8 bytes of magic
//   u32 version, u32 reserved (0)
//   u64 payload bytes
//   payload:
//     u64 fingerprint, i64 step, i64 epoch, i64 batch
//     u64 rng bytes, the rng bytes
//     u64 autotune bytes, the autotune text (version 2 on; version 1 has
//       neither field and reads as an empty text)
//     u64 tensor count, then per tensor:
//       u32 name bytes, the name, u8 DType code, u8 rank, i64 dims[rank],
//       u64 data bytes (= numel * dtypeSize), the data
//   u64 FNV-1a 64 of everything before it
// Writing is atomic: the file is written to `<path>.tmp`, fsynced, renamed
// over `<path>` and the folder fsynced, so a crash or a failed write leaves
// the previous checkpoint in place. Reading checks the magic, the version,
// the size, the checksum, and bounds every length by the file's size.
#pragma once

#include "lwrt/tensor.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lwrt {

/// The version written; reading takes this one and every earlier one.
inline constexpr uint32_t kCheckpointVersion = 2;

/// 64-bit FNV-1a of `bytes`, continuing from `hash` (chain calls to hash
/// several pieces). Trainers may use it for their model fingerprint too.
inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a64(const void* bytes, size_t size, uint64_t hash = kFnv1aOffset);

/// The scalar state of a training run.
struct CheckpointState {
  uint64_t fingerprint = 0;       ///< of the model, computed by the trainer
  int64_t step = 0;               ///< steps completed
  int64_t epoch = 0;              ///< data position: the epoch...
  int64_t batch = 0;              ///< ...and the next batch in it
  std::vector<unsigned char> rng; ///< the RNG state, opaque
  /// The kernel choices the run used (lwrt/autotune.h's text), "" for none.
  std::string autotune;
};

/// A tensor read back from a checkpoint, owning its bytes.
struct CheckpointTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> data; ///< raw, row-major
};

struct Checkpoint {
  CheckpointState state;
  std::vector<CheckpointTensor> tensors;
  /// The tensor named `name`, or null.
  const CheckpointTensor* find(const std::string& name) const;
};

/// A tensor to write: a name and a view of memory the caller owns.
struct NamedTensor {
  std::string name;
  TensorView view;
};

/// Writes a checkpoint to `path` atomically (see above). Returns "" on
/// success, else a message naming the file; `path` is then unchanged
/// (except when only the final sync of the folder fails: the new file is
/// in place then, but may not survive a crash).
/// Names must be unique, ranks at most 255.
std::string writeCheckpoint(const std::string& path, const CheckpointState& state,
                            const std::vector<NamedTensor>& tensors);
/// The same for a checkpoint held in memory (e.g. one read back).
std::string writeCheckpoint(const std::string& path, const Checkpoint& checkpoint);

/// Reads and validates the checkpoint at `path` into `out`. Returns "" on
/// success, else a message naming the file and the problem (`out` is then
/// unspecified).
std::string readCheckpoint(const std::string& path, Checkpoint& out);
/// The same, refusing a checkpoint whose fingerprint is not `fingerprint`
/// (that of another model): the message names both.
std::string readCheckpoint(const std::string& path, uint64_t fingerprint, Checkpoint& out);

/// "ckpt-<step>.lwckpt".
std::string checkpointFileName(int64_t step);

/// The checkpoints in `dir` (files named as checkpointFileName), as
/// (step, path), ascending by step. Empty when `dir` does not exist; other
/// names (including `.tmp` leftovers) are ignored.
std::vector<std::pair<int64_t, std::string>> listCheckpoints(const std::string& dir);

/// The path of the checkpoint with the highest step in `dir`, or "".
std::string latestCheckpoint(const std::string& dir);

/// Deletes all but the `keep` checkpoints with the highest steps in `dir`
/// (keep <= 0 deletes none). Returns "" or a message naming what failed.
std::string keepLastCheckpoints(const std::string& dir, int keep);

} // namespace lwrt
