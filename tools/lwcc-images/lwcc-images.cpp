// lwcc-images: the trainer's image loaders outside a trainer, for tests and
// benchmarks.
//
//   lwcc-images dump --data=folder:DIR|cifar10:DIR --shape=N,C,H,W [--split=train|val|eval]
//       [--augment=standard|flip|none|eval] [--eval-crop=F] [--mean=..] [--std=..] [--seed=S]
//       [--epoch=E] [--skip-bad-images] -o FILE
//     writes every example of the split (file order, as epoch E transforms it)
//     as float32 [count, C, H, W] to FILE and its labels as int64 to FILE.labels;
//     --split=eval is a trainer's evaluation split: DIR/val (CIFAR-10's test
//     file) with the evaluation transform a trainer given --augment (the
//     training transform, standard|flip|none) and --eval-crop would take,
//     which it prints;
//   lwcc-images fuzz DIR [--iterations=N] [--seed=S] [--work=TMPDIR]
//     mutates the JPEG and PNG files below DIR (bit flips, bytes, fields set to
//     extremes, cuts, insertions; PNG chunks' CRCs mended half the time, so the
//     mutation reaches the decoder) and sends each mutant through the decoding
//     path in memory and, in rounds, as files of an image folder through
//     FolderData; exits 0 when nothing crashed;
//   lwcc-images rate DIR [--size=S] [--repeat=R]
//     one thread's images per second on the files below DIR: libjpeg-turbo
//     decoding each JPEG whole (djpeg's settings: RGB, accurate IDCT, fancy
//     upsampling; the physical limit of this path), the loader's decoding of
//     a random resized crop alone, and the loader's whole transform.
// Errors exit 1, bad usage 2.
#include "lwrt/image.h"
#include "lwrt/image_data.h"

#include <algorithm>
#include <chrono>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <jpeglib.h>
#include <memory>
#include <string>
#include <vector>
#include <zlib.h>

namespace {

namespace fs = std::filesystem;

struct Args {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> flags;
  std::string get(const std::string& key, const std::string& fallback = "") const {
    for (const auto& [k, v] : flags)
      if (k == key)
        return v;
    return fallback;
  }
  bool has(const std::string& key) const {
    for (const auto& [k, v] : flags)
      if (k == key)
        return true;
    return false;
  }
};

int usage(const char* why) {
  std::fprintf(stderr,
               "lwcc-images: %s\nusage: lwcc-images dump|fuzz|rate ... (see the source's "
               "header)\n",
               why);
  return 2;
}

std::vector<float> floats(const std::string& text) {
  std::vector<float> out;
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(std::stof(text.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

std::vector<std::string> imageFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    std::string ext = it->path().extension().string();
    for (char& c : ext)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (it->is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".png"))
      files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<unsigned char> readAll(const std::string& path) {
  std::vector<unsigned char> bytes;
  std::string error;
  if (!lwrt::readFileBytes(path, bytes, &error))
    std::fprintf(stderr, "lwcc-images: %s: %s\n", path.c_str(), error.c_str());
  return bytes;
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// --- dump -------------------------------------------------------------------------

int dump(const Args& a) {
  std::string data = a.get("--data"), out = a.get("-o"), split = a.get("--split", "train");
  std::vector<float> shapeF = floats(a.get("--shape"));
  if (data.empty() || out.empty() || shapeF.size() != 4)
    return usage("dump needs --data, --shape=N,C,H,W and -o");
  std::vector<int64_t> shape;
  for (float f : shapeF)
    shape.push_back(static_cast<int64_t>(f));
  lwrt::ImageDataOptions o;
  o.shuffle = false;
  o.mean = floats(a.get("--mean"));
  o.std = floats(a.get("--std"));
  o.seed = std::strtoull(a.get("--seed", "0").c_str(), nullptr, 10);
  o.skipBad = a.has("--skip-bad-images");
  std::string augment = a.get("--augment", "none");
  bool folder = data.rfind("folder:", 0) == 0;
  std::unique_ptr<lwrt::DataSource> source;
  std::string error, dir = data.substr(data.find(':') + 1);
  if (split == "eval") { // what a trainer evaluates on
    o.evalCrop = std::strtod(a.get("--eval-crop", "0").c_str(), nullptr);
    lwrt::ImageDataSet set;
    if (!lwrt::openImageDataSet(data, shape, o, a.get("--augment", ""), true, 0, 0, set, &error)) {
      std::fprintf(stderr, "lwcc-images: %s\n", error.c_str());
      return 1;
    }
    for (const std::string& note : set.notes)
      std::printf("%s\n", note.c_str());
    source = std::move(set.test);
  } else if (augment == "eval")
    o.augment = folder ? lwrt::Augment::CenterCrop : lwrt::Augment::None;
  else if (!lwrt::parseAugment(augment, o.augment))
    return usage("--augment is standard, flip, none or eval");
  if (split != "eval" && folder) {
    std::unique_ptr<lwrt::FolderData> train;
    if (split == "val") {
      train = lwrt::FolderData::open(dir + "/train", shape, o, nullptr, &error);
      if (train)
        source = lwrt::FolderData::open(dir + "/val", shape, o, &train->classNames(), &error);
    } else {
      source = lwrt::FolderData::open(dir + "/train", shape, o, nullptr, &error);
    }
  } else if (split != "eval" && data.rfind("cifar10:", 0) == 0) {
    source = lwrt::Cifar10Data::open(dir, split != "val", shape, o, &error);
  } else if (split != "eval") {
    return usage("--data is folder:DIR or cifar10:DIR");
  }
  if (!source) {
    std::fprintf(stderr, "lwcc-images: %s\n", error.c_str());
    return 1;
  }
  const uint64_t epoch = std::strtoull(a.get("--epoch", "0").c_str(), nullptr, 10);
  const int64_t count = source->numExamples(), size = source->imageSize();
  std::vector<float> images(static_cast<size_t>(count * size));
  std::vector<int64_t> labels(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k)
    if (!source->example(k, images.data() + k * size, &labels[static_cast<size_t>(k)], &error,
                         epoch)) {
      std::fprintf(stderr, "lwcc-images: %s\n", error.c_str());
      return 1;
    }
  std::ofstream f(out, std::ios::binary), l(out + ".labels", std::ios::binary);
  f.write(reinterpret_cast<const char*>(images.data()),
          static_cast<std::streamsize>(images.size() * 4));
  l.write(reinterpret_cast<const char*>(labels.data()),
          static_cast<std::streamsize>(labels.size() * 8));
  if (!f || !l) {
    std::fprintf(stderr, "lwcc-images: cannot write %s\n", out.c_str());
    return 1;
  }
  std::printf("dumped %lld examples of %lld floats\n", static_cast<long long>(count),
              static_cast<long long>(size));
  return 0;
}

// --- fuzz -------------------------------------------------------------------------

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
};

/// Recomputes every PNG chunk's CRC that lies within the file, so that a
/// mutation inside a chunk reaches the decoder instead of its CRC check.
void mendPngCrcs(std::vector<unsigned char>& b) {
  size_t at = 8;
  while (at + 12 <= b.size()) {
    uint32_t len =
        uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | b[at + 3];
    if (len > b.size() - at - 12)
      break;
    uint32_t crc = static_cast<uint32_t>(crc32(0, b.data() + at + 4, len + 4));
    for (int k = 0; k < 4; ++k)
      b[at + 8 + len + k] = static_cast<unsigned char>(crc >> (24 - 8 * k));
    at += 12 + len;
  }
}

std::vector<unsigned char> mutate(const std::vector<unsigned char>& seed, Rng& rng) {
  std::vector<unsigned char> b = seed;
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits && !b.empty(); ++e) {
    size_t at = rng.below(b.size());
    switch (rng.below(7)) {
    case 0: // flip bits
      b[at] ^= static_cast<unsigned char>(1u << rng.below(8));
      break;
    case 1: // a random byte
      b[at] = static_cast<unsigned char>(rng.next());
      break;
    case 2: { // a 16- or 32-bit field set to an extreme (lengths, dimensions)
      static const uint32_t extremes[] = {0, 1, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF};
      uint32_t v = extremes[rng.below(8)];
      size_t n = rng.below(2) ? 2 : 4;
      for (size_t k = 0; k < n && at + k < b.size(); ++k)
        b[at + k] = static_cast<unsigned char>(v >> (8 * (n - 1 - k)));
      break;
    }
    case 3: // cut the file
      b.resize(at);
      break;
    case 4: { // insert a copy of a stretch of itself
      size_t from = rng.below(b.size()), n = std::min<size_t>(1 + rng.below(64), b.size() - from);
      std::vector<unsigned char> piece(b.begin() + static_cast<long>(from),
                                       b.begin() + static_cast<long>(from + n));
      b.insert(b.begin() + static_cast<long>(at), piece.begin(), piece.end());
      break;
    }
    case 5: { // delete a stretch
      size_t n = std::min<size_t>(1 + rng.below(64), b.size() - at);
      b.erase(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + n));
      break;
    }
    default: // a run of 0xFF (markers) or zeros
      for (size_t k = 0, n = 1 + rng.below(8); k < n && at + k < b.size(); ++k)
        b[at + k] = rng.below(2) ? 0xFF : 0x00;
      break;
    }
  }
  if (b.size() > 8 && b[0] == 0x89 && b[1] == 'P' && rng.below(2))
    mendPngCrcs(b);
  return b;
}

int fuzz(const Args& a) {
  if (a.positional.empty())
    return usage("fuzz needs a folder of seed images");
  const std::vector<std::string> seedFiles = imageFiles(a.positional[0]);
  std::vector<std::vector<unsigned char>> seeds;
  for (const std::string& f : seedFiles)
    seeds.push_back(readAll(f));
  if (seeds.empty())
    return usage("no .jpg, .jpeg or .png files below the seed folder");
  const long iterations = std::strtol(a.get("--iterations", "2000").c_str(), nullptr, 10);
  Rng rng{std::strtoull(a.get("--seed", "1").c_str(), nullptr, 10)};
  std::vector<float> out(3 * 32 * 32);
  long decoded = 0, refused = 0;
  auto started = std::chrono::steady_clock::now();
  // In memory: every transform, gray and color, on each mutant.
  for (long i = 0; i < iterations; ++i) {
    const std::vector<unsigned char> m = mutate(seeds[rng.below(seeds.size())], rng);
    lwrt::TransformSpec spec;
    spec.augment = static_cast<lwrt::Augment>(rng.below(4));
    spec.outH = 8 + static_cast<int64_t>(rng.below(25));
    spec.outW = 8 + static_cast<int64_t>(rng.below(25));
    spec.outC = rng.below(2) ? 3 : 1;
    std::string error;
    bool ok = lwrt::transformEncoded(m.data(), m.size(), spec, rng.next(), out.data(), &error);
    if (!ok && error.empty()) {
      std::fprintf(stderr, "lwcc-images: fuzz: a refused mutant without a message\n");
      return 1;
    }
    (ok ? decoded : refused) += 1;
  }
  // As files of an image folder: the start-up check, then decoding with
  // bad images skipped, every example, in two transforms.
  std::string work = a.get("--work");
  if (work.empty())
    work = (fs::temp_directory_path() / "lwcc-images-fuzz").string();
  const long rounds = std::max<long>(1, iterations / 200);
  long filesChecked = 0, filesSkipped = 0;
  for (long r = 0; r < rounds; ++r) {
    std::error_code ec;
    fs::remove_all(work, ec);
    fs::create_directories(work + "/train/a", ec);
    fs::create_directories(work + "/train/b", ec);
    for (int k = 0; k < 64; ++k) {
      const size_t s = rng.below(seeds.size());
      std::vector<unsigned char> m = rng.below(4) ? mutate(seeds[s], rng) : seeds[s];
      std::string name =
          work + "/train/" + (k % 2 ? "a/" : "b/") + std::to_string(k) +
          (seedFiles[s].size() > 4 && seedFiles[s].substr(seedFiles[s].size() - 4) == ".png"
               ? ".png"
               : ".jpg");
      std::ofstream(name, std::ios::binary)
          .write(reinterpret_cast<const char*>(m.data()), static_cast<std::streamsize>(m.size()));
    }
    filesChecked += 64;
    lwrt::ImageDataOptions o;
    o.skipBad = true;
    o.threads = 2;
    o.seed = r;
    o.warn = [](const std::string&) {};
    for (lwrt::Augment aug : {lwrt::Augment::Standard, lwrt::Augment::CenterCrop}) {
      o.augment = aug;
      std::string error;
      auto d = lwrt::FolderData::open(work + "/train", {1, 3, 24, 24}, o, nullptr, &error);
      if (!d)
        continue; // every file bad, or too few: refused with a message
      filesSkipped += d->skippedAtOpen();
      std::vector<float> img(3 * 24 * 24);
      int64_t label;
      for (int64_t k = 0; k < d->numExamples(); ++k)
        d->example(k, img.data(), &label, &error, static_cast<uint64_t>(r));
    }
  }
  fs::remove_all(work);
  std::printf("fuzz: %ld mutants in memory: %ld decoded, %ld refused with a message; %ld files in "
              "%ld image folders through the loader, each opened and drawn twice (%ld skips at "
              "the check); %.1f s, no crash\n",
              iterations, decoded, refused, filesChecked, rounds, filesSkipped,
              secondsSince(started));
  return 0;
}

// --- rate -------------------------------------------------------------------------

struct JpegJump {
  jpeg_error_mgr mgr;
  jmp_buf jump;
};

[[noreturn]] void jumpOnError(j_common_ptr c) {
  longjmp(reinterpret_cast<JpegJump*>(c->err)->jump, 1);
}

/// libjpeg-turbo decoding a whole file as djpeg does: RGB, accurate IDCT,
/// fancy upsampling. False on a bad file.
bool fullDecode(const std::vector<unsigned char>& bytes, std::vector<unsigned char>& pixels) {
  jpeg_decompress_struct cinfo;
  JpegJump err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jumpOnError;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const size_t stride = size_t(cinfo.output_width) * size_t(cinfo.output_components);
  pixels.resize(stride * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

int rate(const Args& a) {
  if (a.positional.empty())
    return usage("rate needs a folder of images");
  std::vector<std::vector<unsigned char>> files;
  for (const std::string& f : imageFiles(a.positional[0]))
    files.push_back(readAll(f));
  if (files.empty())
    return usage("no images below the folder");
  const int64_t size = std::strtol(a.get("--size", "224").c_str(), nullptr, 10);
  const int repeat = std::max(1, std::atoi(a.get("--repeat", "3").c_str()));
  std::vector<unsigned char> pixels;
  std::vector<float> out(static_cast<size_t>(3 * size * size));
  lwrt::TransformSpec spec;
  spec.augment = lwrt::Augment::Standard;
  spec.outH = spec.outW = size;
  spec.outC = 3;
  spec.norm = lwrt::Normalize::of({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f});
  auto best = [&](auto body) { // the fastest of `repeat` passes, in images per second
    double fastest = 1e30;
    for (int r = 0; r < repeat; ++r) {
      auto t = std::chrono::steady_clock::now();
      for (size_t k = 0; k < files.size(); ++k)
        body(k, r);
      fastest = std::min(fastest, secondsSince(t));
    }
    return static_cast<double>(files.size()) / fastest;
  };
  long bad = 0;
  double full = best([&](size_t k, int) { bad += !fullDecode(files[k], pixels); });
  lwrt::Pixels region;
  double crop = best([&](size_t k, int r) {
    lwrt::ImageHeader h;
    std::string e;
    if (!lwrt::readImageHeader(files[k].data(), files[k].size(), h, &e))
      return;
    lwrt::CropBox box = lwrt::sampleCrop(spec.augment, h.width, h.height, size, size,
                                         static_cast<uint64_t>(k) * 977 + static_cast<uint64_t>(r));
    int64_t x0, x1, y0, y1;
    lwrt::resampleSpan(box.x0, box.width, h.width, size, x0, x1);
    lwrt::resampleSpan(box.y0, box.height, h.height, size, y0, y1);
    lwrt::decodeImage(files[k].data(), files[k].size(), 3, 8, x0, y0, x1 - x0, y1 - y0, region, &e);
  });
  double whole = best([&](size_t k, int r) {
    std::string e;
    lwrt::transformEncoded(files[k].data(), files[k].size(), spec,
                           static_cast<uint64_t>(k) * 977 + static_cast<uint64_t>(r), out.data(),
                           &e);
  });
  std::printf("images: %zu files below %s, one thread, best of %d passes\n", files.size(),
              a.positional[0].c_str(), repeat);
  std::printf("libjpeg-turbo whole decode: %.1f img/s%s\n", full,
              bad ? " (some files are not JPEG)" : "");
  std::printf("loader crop decode: %.1f img/s\n", crop);
  std::printf("loader decode + transform (random resized crop to %lldx%lld, flip, normalize): "
              "%.1f img/s\n",
              static_cast<long long>(size), static_cast<long long>(size), whole);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2)
    return usage("no command");
  Args a;
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-o" && i + 1 < argc) {
      a.flags.push_back({"-o", argv[++i]});
    } else if (s.rfind("--", 0) == 0) {
      size_t eq = s.find('=');
      a.flags.push_back({s.substr(0, eq), eq == std::string::npos ? "" : s.substr(eq + 1)});
    } else {
      a.positional.push_back(s);
    }
  }
  std::string command = argv[1];
  try {
    if (command == "dump")
      return dump(a);
    if (command == "fuzz")
      return fuzz(a);
    if (command == "rate")
      return rate(a);
  } catch (const std::exception& e) { // a malformed number in a flag
    return usage(e.what());
  }
  return usage("unknown command");
}
