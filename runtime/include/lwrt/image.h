// lwrt/image.h - image files and torchvision's transforms, for the image loaders
// defines: ImageFormat, ImageHeader, kMaxImagePixels, readImageHeader, checkImageFile,
//          readFileBytes, Pixels, decodeImage, Augment, CropBox, sampleCrop, Normalize,
//          resampleInto, transformEncoded, transformPixels
//
// The path of one training example: the file's bytes -> its header (size,
// channels) -> the crop that the transform draws from (seed, epoch, index)
// -> the pixels of that crop alone, decoded at a reduced scale when the
// crop is much larger than the model's input (JPEG's DCT-domain scaling:
// 1/2, 1/4 or 1/8) -> resampled to the input's H x W with an antialiased
// bilinear filter (PIL's, which torchvision's Resize uses on images) ->
// flipped, normalized and written as planar floats [C, H, W].
//
// JPEG through libjpeg-turbo (grayscale, YCbCr, RGB, CMYK and YCCK,
// baseline or progressive; only the rows and iMCU columns of the crop are
// decoded), PNG through libpng (gray, gray+alpha, RGB, RGBA, palette, any
// bit depth, interlaced or not). Every image becomes the model's channels:
// gray is replicated to 3, color becomes gray by ITU-R 601 luma (PIL's
// convert("L")), alpha is dropped and CMYK inverted as PIL does.
//
// Bad files fail with a message and never crash: decoders' errors and
// warnings (a truncated or corrupt stream) end the decode, images of more
// than kMaxImagePixels are refused before any allocation, and a JPEG of
// more than 500 scans is refused (a progressive file can otherwise make
// decoding arbitrarily slow).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lwrt {

enum class ImageFormat : uint8_t { Jpeg, Png };

struct ImageHeader {
  ImageFormat format = ImageFormat::Jpeg;
  int64_t width = 0, height = 0;
};

/// Larger images are refused (a decompression bomb, or a corrupt header):
/// 64 Mpixels, 8192 x 8192.
constexpr int64_t kMaxImagePixels = int64_t(1) << 26;

/// The format and size of an image held in memory. False with `error` set
/// ("not a JPEG or PNG file ...", "empty file", a decoder's message) when
/// it is not a JPEG or PNG image whose header reads.
bool readImageHeader(const unsigned char* data, size_t size, ImageHeader& header,
                     std::string* error);

/// A check of a file that reads only its start and its end: a JPEG or PNG
/// signature, a header that decodes, a size within kMaxImagePixels, and the
/// end of the stream (JPEG's end-of-image marker, PNG's IEND chunk) where
/// the file ends, which a truncated file lacks. False with `error` set
/// (without the path).
bool checkImageFile(const std::string& path, ImageHeader& header, std::string* error);

/// Reads a regular file whole into `bytes` (reusing its capacity). False
/// with `error` set (without the path) when it is not a regular file or
/// cannot be read; never blocks on a FIFO or a device.
bool readFileBytes(const std::string& path, std::vector<unsigned char>& bytes, std::string* error);

/// Decoded pixels of a rectangle of an image (interleaved, 1 or 3 channels),
/// and where it lies in the image it was decoded from.
struct Pixels {
  /// height rows of width * channels bytes (and maybe more: decoders reuse
  /// and only grow it)
  std::vector<unsigned char> data;
  int channels = 0;
  int64_t x0 = 0, y0 = 0, width = 0, height = 0; ///< the rectangle
  int64_t imageWidth = 0, imageHeight = 0;       ///< the (scaled) image
};

/// Decodes the rectangle [x0, x0 + width) x [y0, y0 + height) of the image
/// in `data` scaled by scaleEighths / 8 (1, 2, 4 or 8; JPEG only, PNG
/// always 8), in the coordinates of the scaled image, with `channels` (1 or
/// 3) channels. JPEG decodes at least the rectangle (whole iMCU columns:
/// out.x0 and out.width say what came), PNG exactly it. False with `error`
/// set when the image is bad.
bool decodeImage(const unsigned char* data, size_t size, int channels, int scaleEighths, int64_t x0,
                 int64_t y0, int64_t width, int64_t height, Pixels& out, std::string* error);

/// The transform of an example, as torchvision composes them.
enum class Augment : uint8_t {
  /// RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3) to the input size,
  /// then RandomHorizontalFlip.
  Standard,
  /// Resize to the input size (aspect not kept), then RandomHorizontalFlip.
  Flip,
  /// Resize to the input size.
  None,
  /// Evaluation: resize so that the shorter side is the input's / the crop
  /// fraction (ImageNet's 0.875 by default), then CenterCrop to the input
  /// size.
  CenterCrop,
};

/// A rectangle of an image's pixels, in pixel units (x0, y0 its corner).
struct CropBox {
  double x0 = 0, y0 = 0, width = 0, height = 0;
  bool flip = false;
};

/// ImageNet's evaluation crop: the center 87.5% of the resized image.
constexpr double kDefaultCropFraction = 0.875;

/// The crop (and flip) of an example of width x height pixels for an input
/// of outH x outW, drawn from `sampleSeed` (a hash of seed, epoch, index);
/// CenterCrop keeps `cropFraction` of the resized shorter side.
CropBox sampleCrop(Augment augment, int64_t width, int64_t height, int64_t outH, int64_t outW,
                   uint64_t sampleSeed, double cropFraction = kDefaultCropFraction);

/// The transform in torchvision's words ("Resize(73) + CenterCrop(64x64)").
std::string describeTransform(Augment augment, int64_t outH, int64_t outW,
                              double cropFraction = kDefaultCropFraction);

/// Per channel: x -> (x / 255 - mean) / std, as multiply and add.
struct Normalize {
  float scale[3] = {1, 1, 1}, shift[3] = {0, 0, 0};
  static Normalize of(const std::vector<float>& mean, const std::vector<float>& std);
};

/// Resamples the box of `src` (in the coordinates of src's image) to outH x
/// outW with PIL's antialiased bilinear filter (its support widened by the
/// downscale factor; clamped at the image's borders), flipped when asked,
/// into planar floats [outC, outH, outW] normalized per channel. `src`
/// must cover the pixels the filter reads (resampleSpan says which).
void resampleInto(const Pixels& src, const CropBox& box, int64_t outH, int64_t outW, int outC,
                  const Normalize& norm, float* out);

/// The source pixels [lo, hi) that resampling [box0, box0 + boxSize) of an
/// axis of `inSize` pixels to `outSize` reads.
void resampleSpan(double box0, double boxSize, int64_t inSize, int64_t outSize, int64_t& lo,
                  int64_t& hi);

/// What the transform of one example needs.
struct TransformSpec {
  Augment augment = Augment::None;
  int64_t outH = 0, outW = 0;
  int outC = 3; ///< 1 or 3
  Normalize norm;
  double cropFraction = kDefaultCropFraction; ///< CenterCrop's
};

/// The whole path for an encoded image: header, crop, scaled decode of the
/// crop, resample, flip, normalize. False with `error` set (no path).
bool transformEncoded(const unsigned char* data, size_t size, const TransformSpec& spec,
                      uint64_t sampleSeed, float* out, std::string* error);

/// The same for decoded pixels (a whole image, e.g. a CIFAR-10 record).
void transformPixels(const Pixels& image, const TransformSpec& spec, uint64_t sampleSeed,
                     float* out);

} // namespace lwrt
