// lwrt/npy.h - numpy arrays as the model's inputs (--data=npy:DIR)
// defines: NpyArray, readNpy, NpyInputOptions, npyInputFiles, NpyInputs
//
// One .npy file per model input, each holding one row per example: the
// images and labels of a classifier, the features and float targets of a
// regression (lwcc --loss=mse), the token ids of a sequence model. The files
// are memory-mapped, not read: a data set larger than memory trains, and
// only the rows a batch needs are touched.
//
// Errors name the file and the problem (a missing file, a bad header, a
// dtype or shape the input does not take, fewer bytes than the header
// says, files of different lengths, a label out of range), and nothing here
// throws, crashes or reads outside a file on bad input.
#pragma once

#include "lwrt/feed.h"
#include "lwrt/trainer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lwrt {

/// A .npy file (format 1.0 to 3.0, C order), mapped into memory.
struct NpyArray {
  std::string path;
  std::string descr;          ///< numpy's dtype string: '<f4', '|u1', ...
  std::vector<int64_t> shape; ///< as the header says
  int64_t itemSize = 0;
  const unsigned char* data = nullptr; ///< the array's bytes, C order
  std::shared_ptr<const void> mapping; ///< keeps `data` mapped
};

/// Maps `path` and checks its header and size. False with `error` naming
/// the file on any problem.
bool readNpy(const std::string& path, NpyArray& out, std::string* error);

struct NpyInputOptions {
  /// Use only the first maxExamples examples of the files (0: all).
  int64_t maxExamples = 0;
  /// Shuffle every epoch (training) or visit in file order (evaluation).
  bool shuffle = true;
  uint64_t seed = 0;
  /// When positive, every value of an integer label input must be below it
  /// and not negative, but for `ignoreIndex` where the model has one (a
  /// language model's padding label, -100).
  int64_t classes = 0;
  std::optional<int64_t> ignoreIndex;
};

/// The files tried for model input `in` of `split` ("train" or "test"), in
/// order: `<name>_<split>.npy` (the input's name, characters other than
/// letters, digits, '.', '-' and '_' as '_'); for a model of one data input
/// and one label input also `x_<split>.npy` and `y_<split>.npy`, tried
/// first; for the training split then `<name>.npy` and `x.npy` / `y.npy`.
std::vector<std::string> npyInputFiles(const std::string& dir, const std::string& split,
                                       const std::vector<InputInfo>& inputs, size_t input);

/// --data=npy:DIR: each model input's rows from its file (npyInputFiles).
/// A file holds (E, ...) with E examples and, per example, the input's
/// shape without its batch dimension N, the first input's (an input of
/// k * N rows, such as a causal LM's [N * T] labels after input_ids [N, T],
/// takes k rows per example: (E, k, ...); dimensions of size 1 may be
/// missing or extra; a flat row of the same size stands for any shape, and
/// any shape for a flat row). Its dtype is the input's ('<f4', '<f8', '<f2',
/// '<i8', '<i4', '|b1'), or uint8 pixels ('|u1') for a float input (divided
/// by 255), or int32 for an int64 input and int64 for an int32 one (values
/// checked to fit). Every file holds the same E.
class NpyInputs final : public InputBatches {
public:
  /// Null with `error` naming the file on any problem.
  static std::unique_ptr<NpyInputs> open(const std::string& dir, const std::string& split,
                                         const std::vector<InputInfo>& inputs,
                                         const NpyInputOptions& options = {},
                                         std::string* error = nullptr);
  ~NpyInputs() override;

  int64_t batchSize() const override { return batch_; }
  int64_t numExamples() const override { return examples_; }
  void setSeed(uint64_t seed) override { orders_.setSeed(seed); }
  bool batch(DataSource::Position p, unsigned char* inputs, std::string* error,
             std::pair<int64_t, int64_t> rows = {0, -1}) const override;
  bool examples(int64_t first, unsigned char* inputs, std::string* error) const override;

  /// The file of each input, in the model's input order.
  std::vector<std::string> files() const;

private:
  struct Column;
  NpyInputs(int64_t batch, int64_t examples, const NpyInputOptions& options);
  /// Writes example `index`'s row of every input at row `row` of `inputs`.
  void store(int64_t index, int64_t row, unsigned char* inputs) const;

  int64_t batch_, examples_;
  bool rowsAreExamples_ = true; ///< every input has N rows (else k * N for some)
  EpochOrders orders_;
  std::vector<Column> columns_;
};

} // namespace lwrt
