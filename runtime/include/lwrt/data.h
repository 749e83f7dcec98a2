// lwrt/data.h - the trainer's data loaders: input batches for a model
// defines: EpochOrders, DataSource, SyntheticData, IdxOptions, IdxData, shuffledOrder,
//          hashWords
//
// A DataSource yields batches in the model's input layout: float32 images
// [N, C, H, W] and int64 labels [N]. An epoch is numExamples() / N batches
// (the last partial batch is dropped); each epoch visits the examples in an
// order drawn from a seeded RNG that depends only on (seed, epoch), never on
// what was drawn before, so seek(position()) of a saved run reproduces the
// batches it would have drawn next, bit for bit.
//
// Errors: the runtime reports failures as a `false` / null result with a
// message in a `std::string* error` out-param (it may be null); messages
// name the file and the problem. Nothing here throws on bad input, and a
// corrupt file cannot make a loader crash, hang or allocate more than the
// file actually holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lwrt {

/// The examples' visiting order of `epoch`: a Fisher-Yates shuffle of
/// 0..n-1 driven by splitmix64 seeded from (seed, epoch) alone.
std::vector<int64_t> shuffledOrder(int64_t n, uint64_t seed, uint64_t epoch);

/// A stateless hash of three words (splitmix64's finalizer, chained): the
/// loaders' counter-based randomness.
uint64_t hashWords(uint64_t a, uint64_t b, uint64_t c);

/// The order in which each epoch visits `n` examples: shuffledOrder of
/// (seed, epoch), or file order without shuffling. The orders of the two
/// epochs asked for last are kept: batches of consecutive epochs are
/// prepared at the same time around an epoch's end. Safe to use from
/// several threads, except setSeed.
class EpochOrders {
public:
  EpochOrders(int64_t n, bool shuffle, uint64_t seed);
  ~EpochOrders();
  /// The whole order of `epoch`; null when not shuffling (file order).
  std::shared_ptr<const std::vector<int64_t>> of(uint64_t epoch) const;
  /// The example at slot `slot` (< n) of `epoch`.
  int64_t at(uint64_t epoch, int64_t slot) const;
  /// A new seed; the kept orders are dropped.
  void setSeed(uint64_t seed);
  uint64_t seed() const { return seed_; }

private:
  int64_t n_;
  bool shuffle_;
  uint64_t seed_;
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

class DataSource {
public:
  /// Where the next batch comes from: batch `batch` of epoch `epoch`.
  struct Position {
    uint64_t epoch = 0, batch = 0;
    bool operator==(const Position&) const = default;
  };

  virtual ~DataSource();

  /// The batch shape [N, C, H, W].
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t batchSize() const { return shape_[0]; }
  /// Floats in one image, C * H * W.
  int64_t imageSize() const { return shape_[1] * shape_[2] * shape_[3]; }
  int64_t numExamples() const { return examples_; }
  /// Whole batches in an epoch (at least 1: loaders refuse fewer examples than N).
  int64_t batchesPerEpoch() const { return examples_ / shape_[0]; }

  /// Writes the next batch, N * C * H * W floats and N labels, and advances
  /// (past the last batch of an epoch to batch 0 of the next). False with
  /// `error` set when an example cannot be loaded (a bad image file); the
  /// position advances all the same.
  bool next(float* images, int64_t* labels, std::string* error = nullptr);

  /// Writes the batch at `p` (p.batch below batchesPerEpoch()), what next()
  /// writes at that position, without moving the position. Safe to call
  /// from several threads at once: the input pipeline prepares batches
  /// ahead of the step this way. False with `error` set as next(). With
  /// `rows` [first, end), only those examples of the batch, at their places
  /// (a process under mpirun prepares its devices' samples alone).
  bool batch(Position p, float* images, int64_t* labels, std::string* error = nullptr,
             std::pair<int64_t, int64_t> rows = {0, -1}) const;

  Position position() const { return pos_; }
  /// Makes `p` the next batch; false (nothing changed) when p.batch is not
  /// below batchesPerEpoch().
  bool seek(Position p, std::string* error = nullptr);
  /// The seed of the shuffle (and of random augmentations): a resumed run
  /// takes its checkpoint's. Not while batches are being drawn.
  void setSeed(uint64_t seed) { orders_.setSeed(seed); }
  uint64_t seed() const { return orders_.seed(); }

  /// Writes example `index` (< numExamples(), in file order) as epoch
  /// `epoch` draws it: an evaluation covers every example, the last partial
  /// batch included. False with `error` set as next().
  bool example(int64_t index, float* image, int64_t* label, std::string* error = nullptr,
               uint64_t epoch = 0) const {
    return load(index, epoch, image, label, error);
  }
  /// The example at slot `slot` (< N * batchesPerEpoch) of epoch `epoch`.
  int64_t exampleAt(uint64_t epoch, int64_t slot) const { return orders_.at(epoch, slot); }

protected:
  /// `shape` and `examples` already validated by the subclass's factory.
  DataSource(std::vector<int64_t> shape, int64_t examples, bool shuffle, uint64_t seed);
  /// Writes example `index`'s image (C * H * W floats) and label as epoch
  /// `epoch` draws it (random augmentations are a function of the seed,
  /// the epoch and the index alone). False with `error` set when it cannot.
  virtual bool load(int64_t index, uint64_t epoch, float* image, int64_t* label,
                    std::string* error) const = 0;

private:
  std::vector<int64_t> shape_;
  int64_t examples_;
  Position pos_;
  EpochOrders orders_;
};

/// Deterministic synthetic data: image element j of example i is a standard
/// normal (Box-Muller) of a hash of (seed, i, j), the label a uniform class
/// of a hash of (seed, i); counter-based, so seek needs no replay. Shuffled
/// per epoch with the same seed.
class SyntheticData : public DataSource {
public:
  /// Null with `error` set when `shape` is not four positive dims, `classes`
  /// not in [1, 2^31) or `examples` below N.
  static std::unique_ptr<SyntheticData> create(const std::vector<int64_t>& shape, int64_t classes,
                                               uint64_t seed, int64_t examples,
                                               std::string* error = nullptr);

protected:
  bool load(int64_t index, uint64_t epoch, float* image, int64_t* label,
            std::string* error) const override;

private:
  SyntheticData(std::vector<int64_t> shape, int64_t classes, uint64_t seed, int64_t examples);
  int64_t classes_;
  uint64_t seed_;
};

struct IdxOptions {
  /// Pixels are scaled to [0, 1], then normalized: (x - mean) / std.
  /// Defaults: Fashion-MNIST's training-set statistics.
  float mean = 0.2860f;
  float std = 0.3530f;
  /// Use only the first maxExamples examples of the files (0: all).
  int64_t maxExamples = 0;
  /// Shuffle every epoch (training) or visit in file order (evaluation).
  bool shuffle = true;
  uint64_t seed = 0;
  /// When positive, every label must be below it.
  int64_t classes = 0;
};

/// MNIST / Fashion-MNIST in IDX files: `<dir>/<split>-images-idx3-ubyte`
/// and `<dir>/<split>-labels-idx1-ubyte`, each plain or gzipped (".gz"; the
/// plain file wins when both exist). Images are resized from the file's
/// rows x cols to the batch's H x W when they differ, bilinearly with
/// align_corners=false and no antialiasing (torchvision's Resize on tensors),
/// and the gray channel is replicated when C == 3 (Grayscale(3)). The raw
/// bytes stay in memory; each batch is converted as it is drawn, with the
/// resize's taps computed once.
class IdxData : public DataSource {
public:
  /// `split` is "train" or "t10k"; `shape` is [N, C, H, W] with C 1 or 3.
  /// Null with `error` set on any problem with the arguments or the files.
  static std::unique_ptr<IdxData> open(const std::string& dir, const std::string& split,
                                       const std::vector<int64_t>& shape,
                                       const IdxOptions& options = {},
                                       std::string* error = nullptr);

  /// The image files' rows and cols.
  int64_t fileRows() const { return rows_; }
  int64_t fileCols() const { return cols_; }
  /// The label of example `index` as stored.
  int64_t label(int64_t index) const { return labels_[static_cast<size_t>(index)]; }

protected:
  bool load(int64_t index, uint64_t epoch, float* image, int64_t* label,
            std::string* error) const override;

private:
  IdxData(std::vector<int64_t> shape, int64_t examples, const IdxOptions& options);

  /// Interpolation taps of one output coordinate.
  struct Tap {
    int64_t i0, i1;
    float l0, l1;
  };
  /// Resizes one image: each source row once along x into `rows` (rows_ x
  /// W floats), then each output row from two of them, the same products
  /// and sums per pixel as interpolating the two rows there.
  void resize(const unsigned char* src, float* image, float* rows) const;

  int64_t rows_ = 0, cols_ = 0;
  std::vector<unsigned char> pixels_; ///< examples x rows x cols
  std::vector<unsigned char> labels_;
  float normalized_[256];              ///< byte -> (byte / 255 - mean) / std
  std::vector<Tap> rowTaps_, colTaps_; ///< when resizing
};

} // namespace lwrt
