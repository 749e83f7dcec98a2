// lwrt/image_data.h - image data sets for the trainer: folders of JPEG and PNG files, CIFAR-10
// defines: ImageDataOptions, FolderData, Cifar10Data, parseAugment, ImageDataSet,
//          openImageDataSet
//
// Both yield what every DataSource yields (float images [N, C, H, W] in the
// model's layout, int64 labels), through torchvision's transforms
// (lwrt/image.h): a training example's crop and flip are drawn from a hash
// of (seed, epoch, index), so a batch is the same bytes whichever thread
// prepares it, and a resumed run sees the batches an uninterrupted one saw.
#pragma once

#include "lwrt/data.h"
#include "lwrt/image.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace lwrt {

struct ImageDataOptions {
  /// The transform (training: Standard, Flip or None; evaluation: see
  /// openImageDataSet).
  Augment augment = Augment::Standard;
  /// CenterCrop's fraction: the shorter side is resized to the input's /
  /// cropFraction before the crop.
  double cropFraction = kDefaultCropFraction;
  /// openImageDataSet (--eval-crop): > 0, the evaluation split takes
  /// Resize + CenterCrop with this fraction, whatever the training
  /// transform; 0, the evaluation transform follows the training one.
  double evalCrop = 0;
  /// Per channel (one value: every channel); empty: ImageNet's statistics
  /// for 3 channels, 0.5 and 0.5 for 1.
  std::vector<float> mean, std;
  bool shuffle = true;
  uint64_t seed = 0;
  /// At most this many examples (0: all): folders take them spread evenly
  /// over the sorted list (every class keeps its share), CIFAR-10 the first.
  int64_t maxExamples = 0;
  /// Bad images (and empty or unreadable class folders) are left out with
  /// a warning instead of failing the open or the batch.
  bool skipBad = false;
  /// Threads that check the files when a folder is opened.
  int threads = 1;
  /// Where warnings go (bad images skipped); empty: stderr.
  std::function<void(const std::string&)> warn;
};

/// An image folder as torchvision's ImageFolder reads it: `dir/CLASS/...`,
/// one folder per class (classes sorted by name, label = position), every
/// .jpg, .jpeg and .png file (any case) below it an example, sorted by path.
/// Opening lists the folders and checks every file's start and end
/// (checkImageFile), in parallel; images are decoded as batches are drawn.
/// A file that fails then (a corrupt stream inside the data) fails the
/// batch with a message naming it, or with skipBad gives its slot to the
/// next good example in file order (the same one every time) and is named
/// in a warning once.
class FolderData : public DataSource {
public:
  /// `classes`: the class names to use (an evaluation split takes the
  /// training split's: each of its folders must be one of them); null: the
  /// folders found. Null with `error` set on a problem with the folder or
  /// a bad file (unless skipBad).
  static std::unique_ptr<FolderData> open(const std::string& dir, const std::vector<int64_t>& shape,
                                          const ImageDataOptions& options,
                                          const std::vector<std::string>* classes,
                                          std::string* error);

  const std::vector<std::string>& classNames() const { return classes_; }
  const std::string& path(int64_t index) const { return files_[static_cast<size_t>(index)].path; }
  int64_t label(int64_t index) const { return files_[static_cast<size_t>(index)].label; }
  /// "4 classes, 300 images (240 JPEG, 60 PNG), 24x18 to 400x300 pixels".
  std::string summary() const { return summary_; }
  /// Files left out: bad images (at open and since) and ignored files.
  int64_t skippedAtOpen() const { return skippedAtOpen_; }
  int64_t ignored() const { return ignored_; }

protected:
  bool load(int64_t index, uint64_t epoch, float* image, int64_t* label,
            std::string* error) const override;

private:
  struct File {
    std::string path;
    int64_t label;
  };
  FolderData(std::vector<int64_t> shape, std::vector<File> files, const ImageDataOptions& options);
  /// Decodes and transforms `index`'s file; false with `why` set.
  bool transform(int64_t index, uint64_t epoch, float* image, std::string* why) const;

  std::vector<File> files_;
  std::vector<std::string> classes_;
  TransformSpec spec_;
  bool skipBad_;
  std::function<void(const std::string&)> warn_;
  std::string summary_;
  int64_t skippedAtOpen_ = 0, ignored_ = 0;
  mutable std::mutex badMutex_;
  mutable std::set<int64_t> bad_; ///< found bad while decoding (skipBad)
};

/// CIFAR-10's binary version: `dir/data_batch_1.bin` .. `data_batch_5.bin`
/// (training) or `dir/test_batch.bin` (test), or the same under
/// `dir/cifar-10-batches-bin/`. Each record is a label byte (0-9) and 3072
/// pixel bytes: the red, green and blue planes of a 32x32 image, row by row.
/// The records stay in memory; each example is transformed as it is drawn
/// (to the model's size and channels).
class Cifar10Data : public DataSource {
public:
  static std::unique_ptr<Cifar10Data> open(const std::string& dir, bool train,
                                           const std::vector<int64_t>& shape,
                                           const ImageDataOptions& options, std::string* error);
  /// The folder the files were found in.
  const std::string& folder() const { return folder_; }
  int64_t label(int64_t index) const { return records_[static_cast<size_t>(index) * kRecord]; }

  static constexpr int64_t kSide = 32, kRecord = 1 + 3 * 32 * 32;

protected:
  bool load(int64_t index, uint64_t epoch, float* image, int64_t* label,
            std::string* error) const override;

private:
  Cifar10Data(std::vector<int64_t> shape, int64_t examples, const ImageDataOptions& options);

  std::string folder_;
  std::vector<unsigned char> records_;
  TransformSpec spec_;
};

/// "standard", "flip" or "none" (--augment); false otherwise.
bool parseAugment(const std::string& text, Augment& out);

/// The trainer's splits of an image data set.
struct ImageDataSet {
  std::unique_ptr<DataSource> train, test;
  std::vector<std::string> notes; ///< what was found, a line each
};

/// Opens `spec`, "folder:DIR" (DIR/train and, with `eval`, DIR/val, which
/// takes the training split's classes) or "cifar10:DIR", for batches of
/// `shape`. `options` are the training split's; `augment` ("" for the
/// default: standard for folders, flip for CIFAR-10) its transform; the
/// evaluation split takes file order, at most `evalExamples` examples (0:
/// all) and the evaluation transform: with options.evalCrop, Resize +
/// CenterCrop of that fraction; else after folders' standard transform,
/// ImageNet's Resize(size / 0.875) + CenterCrop, and after flip or none (and
/// for CIFAR-10), the resize of the whole image. `notes` name each split's
/// transform. Fails when the data has more classes
/// than the model's `modelClasses` logits.
bool openImageDataSet(const std::string& spec, const std::vector<int64_t>& shape,
                      ImageDataOptions options, const std::string& augment, bool eval,
                      int64_t evalExamples, int64_t modelClasses, ImageDataSet& out,
                      std::string* error);

} // namespace lwrt
