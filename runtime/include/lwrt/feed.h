// lwrt/feed.h - the trainer's input pipeline: each step's input buffer, prepared ahead
// defines: ImageLayout, imageLayout, storeBatch, InputBatches, imageBatches,
//          fillSyntheticInputs, FillFn, FeedOptions, BatchFeed, createPrefetchFeed,
//          createPoolFeed, createExampleFeed
//
// A BatchFeed hands the trainer, for each training step in turn, a host
// buffer holding that step's inputs in the model's layout (ModelInfo's
// inputBytes, each input at its offset). Buffers come from the runner's
// allocateHost (page-locked on CUDA, so uploads are asynchronous). Batches
// are prepared by a fill function of the step alone, never of what was
// drawn before or of which thread drew it: the buffer of a step is the same
// bytes whatever the thread count, prefetch depth or timing, and a run
// resumed at step s sees the batches an uninterrupted run saw from s on.
#pragma once

#include "lwrt/data.h"
#include "lwrt/trainer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lwrt {

/// Where a classifier's image and label inputs are, when it has exactly one
/// of each (image [N,C,H,W], or [N,D] with D a square: a flattened image).
struct ImageLayout {
  const InputInfo* image = nullptr;
  const InputInfo* label = nullptr;
  std::vector<int64_t> shape; ///< [N, C, H, W] as the loaders produce it
};

/// The layout of `m`'s inputs, or nothing with `why` set.
std::optional<ImageLayout> imageLayout(const ModelInfo& m, std::string& why);

/// Writes loader output (float images, int64 labels) into an input buffer
/// in the model's element types.
void storeBatch(const ImageLayout& l, const float* images, const int64_t* labels,
                unsigned char* inputs);

/// A data set drawn as whole input buffers (ModelInfo's inputBytes, each
/// input at its offset): the training batches of each epoch, shuffled by
/// the seed, and the examples in file order for an evaluation. Batches are
/// a function of their position alone, and may be drawn from several
/// threads at once.
class InputBatches {
public:
  virtual ~InputBatches() = default;
  /// N, the examples of a batch.
  virtual int64_t batchSize() const = 0;
  virtual int64_t numExamples() const = 0;
  /// Whole batches in an epoch (the last partial batch is dropped).
  int64_t batchesPerEpoch() const { return numExamples() / batchSize(); }
  /// The shuffle's seed (and that of random augmentations): a resumed run
  /// takes its checkpoint's. Not while batches are being drawn.
  virtual void setSeed(uint64_t seed) = 0;
  /// Writes training batch `p` (p.batch below batchesPerEpoch()) into
  /// `inputs`; with `rows` [first, end) only those examples of the batch, at
  /// their places (a process under mpirun prepares its devices' samples
  /// alone). False with `error` set when an example cannot be loaded.
  virtual bool batch(DataSource::Position p, unsigned char* inputs, std::string* error,
                     std::pair<int64_t, int64_t> rows = {0, -1}) const = 0;
  /// Writes examples first .. first + N - 1 in file order, wrapping past
  /// the last: an evaluation batch. False with `error` set as batch().
  virtual bool examples(int64_t first, unsigned char* inputs, std::string* error) const = 0;
};

/// A loader of images and labels (`data`, whose batch shape is
/// layout.shape) as input buffers in the model's layout.
std::unique_ptr<InputBatches> imageBatches(const ImageLayout& layout,
                                           std::unique_ptr<DataSource> data);

/// Seeded synthetic values for every input of `m`, a function of (seed,
/// index) alone (counter-based): floats roughly standard normal (a sum of
/// four uniforms, scaled to unit variance), integers uniform in [0,
/// classes) (2 without a classification loss).
void fillSyntheticInputs(const ModelInfo& m, unsigned char* inputs, uint64_t seed, uint64_t index);

/// Writes the input buffer of `step`; must be safe to call from several
/// threads at once and depend on `step` alone. False with `error` set on
/// failure.
using FillFn = std::function<bool(int64_t step, unsigned char* inputs, std::string* error)>;

struct FeedOptions {
  int threads = 1; ///< threads preparing batches
  int depth = 3;   ///< buffers: the one in use and depth - 1 prepared ahead
};

class BatchFeed {
public:
  virtual ~BatchFeed() = default;
  /// The input buffer of `step`, ready, valid until release(step). Steps
  /// are acquired in order from the first step, each released before the
  /// one `depth` steps later is acquired. Null with `error` set when
  /// preparing it failed.
  virtual const unsigned char* acquire(int64_t step, std::string* error) = 0;
  /// The caller is done with the buffer of `step` (its upload has ended).
  virtual void release(int64_t step) = 0;
};

/// Prepares steps first, first + 1, ... (below `end`) on options.threads
/// threads into options.depth host buffers of `bytes`, ahead of acquire.
/// Null with `error` set when the buffers cannot be had.
std::unique_ptr<BatchFeed> createPrefetchFeed(StepRunner& runner, int64_t bytes, FillFn fill,
                                              int64_t first, int64_t end,
                                              const FeedOptions& options, std::string* error);

/// `batches` buffers filled once, in parallel (fill is called with 0 ..
/// batches - 1); step s gets buffer s % batches. For data that repeats:
/// synthetic batches, a raw batch.
std::unique_ptr<BatchFeed> createPoolFeed(StepRunner& runner, int64_t bytes, FillFn fill,
                                          int64_t batches, const FeedOptions& options,
                                          std::string* error);

/// Evaluation batches prepared ahead like training ones: batch b (below
/// `batches`) holds examples b * N .. b * N + N - 1 of `data` in file order
/// (wrapping past the last).
std::unique_ptr<BatchFeed> createExampleFeed(StepRunner& runner, int64_t bytes,
                                             const InputBatches& data, int64_t batches,
                                             const FeedOptions& options, std::string* error);

} // namespace lwrt
