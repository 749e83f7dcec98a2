// Image data sets for the trainer: image folders (listing, the start-up
// check of every file, decoding as batches are drawn, bad images) and
// CIFAR-10's binary files; and how the trainer opens either as its
// training and evaluation splits.
#include "lwrt/image_data.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <thread>
#include <utility>

namespace lwrt {

namespace {

bool fail(std::string* error, const std::string& message) {
  if (error)
    *error = message;
  return false;
}

/// The seed of an example's random transform: its own stream, apart from
/// the shuffle's (which hashes (seed, epoch) with a constant).
uint64_t sampleSeed(uint64_t seed, uint64_t epoch, int64_t index) {
  return hashWords(seed ^ 0x7F4A7C159E3779B9ull, epoch, static_cast<uint64_t>(index));
}

bool checkShape(const std::vector<int64_t>& shape, const char* what, std::string* error) {
  if (shape.size() != 4 || shape[0] < 1 || (shape[1] != 1 && shape[1] != 3) || shape[2] < 1 ||
      shape[3] < 1 || shape[2] > 16384 || shape[3] > 16384)
    return fail(error,
                std::string(what) +
                    ": the model's image input must be [N, 1 or 3, H, W] (H, W up to 16384)");
  return true;
}

/// The transform of `options` for `shape`, with the normalization checked.
bool makeSpec(const std::vector<int64_t>& shape, const ImageDataOptions& options,
              TransformSpec& spec, std::string* error) {
  const int channels = static_cast<int>(shape[1]);
  std::vector<float> mean = options.mean, std = options.std;
  if (mean.empty())
    mean = channels == 3 ? std::vector<float>{0.485f, 0.456f, 0.406f} : std::vector<float>{0.5f};
  if (std.empty())
    std = channels == 3 ? std::vector<float>{0.229f, 0.224f, 0.225f} : std::vector<float>{0.5f};
  for (const auto* v : {&mean, &std})
    if (v->size() != 1 && v->size() != static_cast<size_t>(channels))
      return fail(error, std::string(v == &mean ? "--mean" : "--std") + " has " +
                             std::to_string(v->size()) + " values; the model's input has " +
                             std::to_string(channels) + " channels");
  for (float s : std)
    if (!(s > 0.0f) || !std::isfinite(s))
      return fail(error, "--std values must be positive");
  for (float m : mean)
    if (!std::isfinite(m))
      return fail(error, "--mean values must be finite");
  spec.augment = options.augment;
  spec.outH = shape[2];
  spec.outW = shape[3];
  spec.outC = channels;
  spec.norm = Normalize::of(mean, std);
  spec.cropFraction = options.cropFraction;
  return true;
}

void defaultWarn(const std::string& message) {
  std::fprintf(stderr, "warning: %s\n", message.c_str());
}

bool hasImageExtension(const std::string& name) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos)
    return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

/// The names in a folder, sorted. False with `error` naming it.
bool listNames(const std::string& dir, std::vector<std::string>& names, std::string* error) {
  names.clear();
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return fail(error, "cannot read folder " + dir + ": " + std::strerror(errno));
  for (;;) {
    errno = 0;
    struct dirent* e = ::readdir(d);
    if (!e)
      break;
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.emplace_back(e->d_name);
  }
  int saved = errno;
  ::closedir(d);
  if (saved != 0)
    return fail(error, "cannot read folder " + dir + ": " + std::strerror(saved));
  std::sort(names.begin(), names.end());
  return true;
}

/// What listing a folder found: image files, and the problems (each names
/// its path) that fail the open, or are skipped with skipBad.
struct Listing {
  std::vector<std::string> images;
  std::vector<std::string> problems;
  int64_t ignored = 0;
  std::set<std::pair<dev_t, ino_t>> visited; ///< folders entered (symlink cycles)
};

/// Every image file below `dir` (a class folder), depth first, by name.
void walk(const std::string& dir, Listing& out) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0 && !out.visited.insert({st.st_dev, st.st_ino}).second)
    return; // a symlink back to a folder already walked
  std::vector<std::string> names;
  std::string why;
  if (!listNames(dir, names, &why)) {
    out.problems.push_back(why);
    return;
  }
  for (const std::string& name : names) {
    std::string path = dir + "/" + name;
    if (::stat(path.c_str(), &st) != 0) {
      out.problems.push_back("cannot read " + path + ": " + std::strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      walk(path, out);
    } else if (hasImageExtension(name)) {
      out.images.push_back(path);
    } else {
      ++out.ignored;
    }
  }
}

std::string joinProblems(const std::vector<std::string>& problems) {
  std::string text;
  const size_t shown = std::min<size_t>(problems.size(), 10);
  for (size_t k = 0; k < shown; ++k)
    text += "\n  " + problems[k];
  if (problems.size() > shown)
    text += "\n  ... and " + std::to_string(problems.size() - shown) + " more";
  return text;
}

} // namespace

// --- FolderData -------------------------------------------------------------------

FolderData::FolderData(std::vector<int64_t> shape, std::vector<File> files,
                       const ImageDataOptions& options)
    : DataSource(std::move(shape), static_cast<int64_t>(files.size()), options.shuffle,
                 options.seed),
      files_(std::move(files)), skipBad_(options.skipBad),
      warn_(options.warn ? options.warn : defaultWarn) {}

std::unique_ptr<FolderData> FolderData::open(const std::string& dir,
                                             const std::vector<int64_t>& shape,
                                             const ImageDataOptions& options,
                                             const std::vector<std::string>* classes,
                                             std::string* error) {
  if (!checkShape(shape, dir.c_str(), error))
    return nullptr;
  TransformSpec spec;
  if (!makeSpec(shape, options, spec, error))
    return nullptr;
  std::vector<std::string> names;
  if (!listNames(dir, names, error))
    return nullptr;
  // The class folders: every entry that is a folder (files beside them are
  // ignored, as ImageFolder does).
  Listing listing;
  std::vector<std::string> found;
  int64_t ignored = 0;
  for (const std::string& name : names) {
    std::string path = dir + "/" + name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      listing.problems.push_back("cannot read " + path + ": " + std::strerror(errno));
    else if (S_ISDIR(st.st_mode))
      found.push_back(name);
    else
      ++ignored;
  }
  const std::vector<std::string>& classNames = classes ? *classes : found;
  if (classNames.empty() && listing.problems.empty()) {
    fail(error, dir + " holds no class folders: lay the images out as " + dir +
                    "/CLASS/IMAGE.jpg (.jpeg, .png), one folder per class");
    return nullptr;
  }
  std::vector<File> files;
  for (const std::string& name : found) {
    auto it = std::find(classNames.begin(), classNames.end(), name);
    if (it == classNames.end()) {
      fail(error, dir + "/" + name + ": a class the training split does not have (classes: " +
                      std::to_string(classNames.size()) + " folders of the training split)");
      return nullptr;
    }
    const int64_t label = it - classNames.begin();
    size_t before = listing.images.size();
    walk(dir + "/" + name, listing);
    if (listing.images.size() == before)
      listing.problems.push_back("class folder " + dir + "/" + name +
                                 " holds no .jpg, .jpeg or .png image");
    for (size_t k = before; k < listing.images.size(); ++k)
      files.push_back({listing.images[k], label});
  }
  ignored += listing.ignored;
  // --train-examples / --eval-examples: a subset spread over the classes.
  if (options.maxExamples > 0 && options.maxExamples < static_cast<int64_t>(files.size())) {
    std::vector<File> subset;
    const int64_t n = static_cast<int64_t>(files.size()), want = options.maxExamples;
    for (int64_t k = 0; k < want; ++k)
      subset.push_back(std::move(files[static_cast<size_t>(k * n / want)]));
    files = std::move(subset);
  }

  // Every file's start and end, in parallel.
  std::vector<std::string> why(files.size());
  std::vector<ImageHeader> headers(files.size());
  std::atomic<size_t> next{0};
  auto check = [&] {
    for (size_t k; (k = next++) < files.size();)
      if (!checkImageFile(files[k].path, headers[k], &why[k]))
        why[k] = files[k].path + ": " + why[k];
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::clamp(options.threads, 1, 64); ++t)
    pool.emplace_back(check);
  check();
  for (std::thread& t : pool)
    t.join();
  std::vector<File> good;
  int64_t jpeg = 0, png = 0, minArea = -1, maxArea = -1;
  std::string smallest, largest;
  for (size_t k = 0; k < files.size(); ++k) {
    if (!why[k].empty()) {
      listing.problems.push_back(why[k]);
      continue;
    }
    const ImageHeader& h = headers[k];
    (h.format == ImageFormat::Jpeg ? jpeg : png) += 1;
    const int64_t area = h.width * h.height;
    std::string size = std::to_string(h.width) + "x" + std::to_string(h.height);
    if (minArea < 0 || area < minArea) {
      minArea = area;
      smallest = size;
    }
    if (area > maxArea) {
      maxArea = area;
      largest = size;
    }
    good.push_back(std::move(files[k]));
  }
  if (!listing.problems.empty() && !options.skipBad) {
    fail(error, listing.problems.front() +
                    (listing.problems.size() > 1
                         ? " (and " + std::to_string(listing.problems.size() - 1) + " more)"
                         : "") +
                    "; --skip-bad-images trains without them");
    return nullptr;
  }
  const int64_t examples = static_cast<int64_t>(good.size());
  if (examples < shape[0]) {
    fail(error, dir + ": " + std::to_string(examples) + " good images" +
                    (options.maxExamples > 0 ? " (of the examples asked for)" : "") +
                    ", fewer than the batch size " + std::to_string(shape[0]));
    return nullptr;
  }
  std::unique_ptr<FolderData> data(new FolderData(shape, std::move(good), options));
  data->classes_ = classNames;
  data->spec_ = spec;
  data->ignored_ = ignored;
  data->skippedAtOpen_ = static_cast<int64_t>(listing.problems.size());
  if (!listing.problems.empty())
    data->warn_("skipping " + std::to_string(listing.problems.size()) + " bad image" +
                (listing.problems.size() > 1 ? "s or folders" : " or folder") + " in " + dir + ":" +
                joinProblems(listing.problems));
  data->summary_ = std::to_string(classNames.size()) + " classes, " + std::to_string(examples) +
                   " images (" + std::to_string(jpeg) + " JPEG, " + std::to_string(png) +
                   " PNG), " + smallest + " to " + largest + " pixels";
  if (ignored > 0)
    data->summary_ += "; " + std::to_string(ignored) + " other files ignored";
  return data;
}

bool FolderData::transform(int64_t index, uint64_t epoch, float* image, std::string* why) const {
  thread_local std::vector<unsigned char> bytes;
  if (!readFileBytes(path(index), bytes, why))
    return false;
  return transformEncoded(bytes.data(), bytes.size(), spec_, sampleSeed(seed(), epoch, index),
                          image, why);
}

bool FolderData::load(int64_t index, uint64_t epoch, float* image, int64_t* label,
                      std::string* error) const {
  const int64_t n = numExamples();
  std::string why;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t at = (index + k) % n;
    if (skipBad_) {
      std::lock_guard<std::mutex> lock(badMutex_);
      if (bad_.count(at))
        continue;
    }
    if (transform(at, epoch, image, &why)) {
      *label = files_[static_cast<size_t>(at)].label;
      return true;
    }
    if (!skipBad_)
      return fail(error, path(at) + ": " + why + "; --skip-bad-images trains without it");
    // The same file fails every time: its slot goes to the next good one.
    bool first;
    {
      std::lock_guard<std::mutex> lock(badMutex_);
      first = bad_.insert(at).second;
    }
    if (first)
      warn_("skipping bad image " + path(at) + ": " + why +
            " (found while decoding; the next image in file order takes its place)");
  }
  return fail(error, "every image failed to decode");
}

// --- Cifar10Data ------------------------------------------------------------------

Cifar10Data::Cifar10Data(std::vector<int64_t> shape, int64_t examples,
                         const ImageDataOptions& options)
    : DataSource(std::move(shape), examples, options.shuffle, options.seed) {}

std::unique_ptr<Cifar10Data> Cifar10Data::open(const std::string& dir, bool train,
                                               const std::vector<int64_t>& shape,
                                               const ImageDataOptions& options,
                                               std::string* error) {
  if (!checkShape(shape, "CIFAR-10", error))
    return nullptr;
  TransformSpec spec;
  if (!makeSpec(shape, options, spec, error))
    return nullptr;
  std::vector<std::string> names;
  if (train)
    for (int k = 1; k <= 5; ++k)
      names.push_back("data_batch_" + std::to_string(k) + ".bin");
  else
    names.push_back("test_batch.bin");
  // The folder the archive unpacks into, when given its parent.
  std::string folder = dir.empty() ? "." : dir;
  struct stat st;
  if (::stat((folder + "/" + names[0]).c_str(), &st) != 0 &&
      ::stat((folder + "/cifar-10-batches-bin/" + names[0]).c_str(), &st) == 0)
    folder += "/cifar-10-batches-bin";
  std::vector<unsigned char> records, bytes;
  for (const std::string& name : names) {
    const std::string path = folder + "/" + name;
    std::string why;
    if (!readFileBytes(path, bytes, &why)) {
      fail(error, path + ": " + why + " (CIFAR-10's binary version: " +
                      (train ? "data_batch_1.bin .. data_batch_5.bin" : "test_batch.bin") + ")");
      return nullptr;
    }
    if (bytes.empty() || bytes.size() % kRecord != 0) {
      fail(error, path + ": " + std::to_string(bytes.size()) +
                      " bytes, not a whole number of 3073-byte records (a label byte and a "
                      "32x32 RGB image)" +
                      (bytes.size() % kRecord ? " (truncated?)" : ""));
      return nullptr;
    }
    for (size_t r = 0; r < bytes.size(); r += kRecord)
      if (bytes[r] > 9) {
        fail(error, path + ": record " + std::to_string(r / kRecord) + " has label " +
                        std::to_string(bytes[r]) + ", not 0-9");
        return nullptr;
      }
    records.insert(records.end(), bytes.begin(), bytes.end());
  }
  int64_t examples = static_cast<int64_t>(records.size() / kRecord);
  if (options.maxExamples > 0)
    examples = std::min(examples, options.maxExamples);
  if (examples < shape[0]) {
    fail(error, folder + ": " + std::to_string(examples) + " examples, fewer than the batch size " +
                    std::to_string(shape[0]));
    return nullptr;
  }
  records.resize(static_cast<size_t>(examples * kRecord));
  std::unique_ptr<Cifar10Data> data(new Cifar10Data(shape, examples, options));
  data->folder_ = folder;
  data->records_ = std::move(records);
  data->spec_ = spec;
  return data;
}

bool Cifar10Data::load(int64_t index, uint64_t epoch, float* image, int64_t* label,
                       std::string*) const {
  const unsigned char* record = records_.data() + index * kRecord;
  thread_local Pixels pixels;
  pixels.channels = 3;
  pixels.x0 = pixels.y0 = 0;
  pixels.width = pixels.height = pixels.imageWidth = pixels.imageHeight = kSide;
  pixels.data.resize(3 * kSide * kSide);
  const int64_t plane = kSide * kSide;
  for (int64_t p = 0; p < plane; ++p)
    for (int64_t c = 0; c < 3; ++c)
      pixels.data[static_cast<size_t>(3 * p + c)] = record[1 + c * plane + p];
  transformPixels(pixels, spec_, sampleSeed(seed(), epoch, index), image);
  *label = record[0];
  return true;
}

// --- the trainer's image data sets ------------------------------------------------

bool parseAugment(const std::string& text, Augment& out) {
  if (text == "standard")
    out = Augment::Standard;
  else if (text == "flip")
    out = Augment::Flip;
  else if (text == "none")
    out = Augment::None;
  else
    return false;
  return true;
}

bool openImageDataSet(const std::string& spec, const std::vector<int64_t>& shape,
                      ImageDataOptions options, const std::string& augment, bool eval,
                      int64_t evalExamples, int64_t modelClasses, ImageDataSet& out,
                      std::string* error) {
  const bool folder = spec.rfind("folder:", 0) == 0;
  const std::string dir = spec.substr(spec.find(':') + 1);
  // Folders of photos train with ImageNet's augmentation; CIFAR-10's 32x32
  // images with flips alone, its usual recipe.
  options.augment = folder ? Augment::Standard : Augment::Flip;
  if (!augment.empty() && !parseAugment(augment, options.augment))
    return fail(error, "--augment=" + augment + " is not standard, flip or none");
  ImageDataOptions evalOptions = options;
  evalOptions.shuffle = false;
  evalOptions.maxExamples = evalExamples;
  // Evaluation sees what training saw: a folder's ImageNet center crop
  // after random resized crops, the whole image after resizes of the whole
  // image (and CIFAR-10's whole 32x32 images).
  if (options.evalCrop > 0) {
    evalOptions.augment = Augment::CenterCrop;
    evalOptions.cropFraction = options.evalCrop;
  } else {
    evalOptions.augment =
        folder && options.augment == Augment::Standard ? Augment::CenterCrop : Augment::None;
    evalOptions.cropFraction = kDefaultCropFraction;
  }
  out.notes.clear();
  const int64_t outH = shape.size() == 4 ? shape[2] : 0, outW = shape.size() == 4 ? shape[3] : 0;
  auto transformNotes = [&] {
    out.notes.push_back("training transform: " +
                        describeTransform(options.augment, outH, outW, options.cropFraction));
    if (eval)
      out.notes.push_back("evaluation transform: " + describeTransform(evalOptions.augment, outH,
                                                                       outW,
                                                                       evalOptions.cropFraction));
  };
  if (folder) {
    auto train = FolderData::open(dir + "/train", shape, options, nullptr, error);
    if (!train)
      return false;
    const int64_t classes = static_cast<int64_t>(train->classNames().size());
    out.notes.push_back(dir + "/train: " + train->summary());
    if (modelClasses > 0 && classes > modelClasses)
      return fail(error, dir + "/train has " + std::to_string(classes) +
                             " classes, but the model's output has " +
                             std::to_string(modelClasses) + " logits: build a model of " +
                             std::to_string(classes) + " classes");
    if (modelClasses > classes)
      out.notes.push_back("the model's output has " + std::to_string(modelClasses) +
                          " logits for " + std::to_string(classes) + " classes");
    transformNotes();
    if (eval) {
      auto val = FolderData::open(dir + "/val", shape, evalOptions, &train->classNames(), error);
      if (!val)
        return false;
      out.notes.push_back(dir + "/val: " + val->summary());
      out.test = std::move(val);
    }
    out.train = std::move(train);
    return true;
  }
  if (modelClasses > 0 && modelClasses < 10)
    return fail(error, "CIFAR-10 has 10 classes, but the model's output has " +
                           std::to_string(modelClasses) + " logits");
  auto train = Cifar10Data::open(dir, true, shape, options, error);
  if (!train)
    return false;
  out.notes.push_back(train->folder() + ": CIFAR-10, 10 classes, " +
                      std::to_string(train->numExamples()) + " training images");
  if (eval) {
    auto test = Cifar10Data::open(dir, false, shape, evalOptions, error);
    if (!test)
      return false;
    out.notes.back() += ", " + std::to_string(test->numExamples()) + " test images";
    out.test = std::move(test);
  }
  transformNotes();
  out.train = std::move(train);
  return true;
}

} // namespace lwrt
