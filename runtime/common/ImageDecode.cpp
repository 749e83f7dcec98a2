// Image files for the image loaders: JPEG through libjpeg-turbo's libjpeg
// API (DCT-domain scaling, and partial decoding: only the crop's rows and
// iMCU columns), PNG through libpng; reading files without blocking, and
// the cheap start-and-end check of a file that the loaders run on every
// image before training.
//
// Both libraries report errors by longjmp. Each decode runs in one function
// that calls setjmp and holds no C++ object whose destructor a longjmp
// could skip: buffers live in the caller's Pixels.
#include "lwrt/image.h"

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

namespace lwrt {

namespace {

bool fail(std::string* error, const std::string& message) {
  if (error)
    *error = message;
  return false;
}

constexpr unsigned char kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

/// A progressive JPEG of more scans than this is refused: every scan is a
/// pass over the whole image, so a small crafted file could otherwise keep
/// a loader thread busy for minutes.
constexpr int kMaxJpegScans = 500;

std::string sizeText(int64_t w, int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

std::string tooLarge(int64_t w, int64_t h) {
  return "an image of " + sizeText(w, h) + " pixels, more than the loader's limit of " +
         std::to_string(kMaxImagePixels) + " pixels";
}

/// What the first bytes of a file that is neither JPEG nor PNG say it is.
std::string notAnImage(const unsigned char* data, size_t size) {
  if (size == 0)
    return "empty file (0 bytes)";
  auto starts = [&](const char* magic) {
    size_t n = std::strlen(magic);
    return size >= n && std::memcmp(data, magic, n) == 0;
  };
  std::string what;
  if (starts("GIF8"))
    what = " (a GIF image)";
  else if (starts("BM"))
    what = " (a BMP image)";
  else if (size >= 12 && starts("RIFF") && std::memcmp(data + 8, "WEBP", 4) == 0)
    what = " (a WebP image)";
  else if (starts("II*") || starts("MM"))
    what = " (a TIFF image)";
  std::string hex;
  for (size_t k = 0; k < std::min<size_t>(size, 8); ++k) {
    char byte[4];
    std::snprintf(byte, sizeof byte, "%s%02x", k ? " " : "", data[k]);
    hex += byte;
  }
  return "not a JPEG or PNG image" + what + ": it starts with bytes " + hex;
}

// --- JPEG -----------------------------------------------------------------------

struct JpegErrors {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

[[noreturn]] void jpegFail(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  char text[JMSG_LENGTH_MAX];
  c->err->format_message(c, text);
  std::snprintf(e->message, sizeof e->message, "JPEG: %s", text);
  longjmp(e->jump, 1);
}

/// libjpeg's warnings report a damaged stream that it would go on decoding
/// into gray or smeared pixels: they end the decode, except the few that
/// leave the image whole.
void jpegMessage(j_common_ptr c, int level) {
  if (level >= 0) // trace output
    return;
  int code = c->err->msg_code;
  if (code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC)
    return;
  jpegFail(c);
}

void jpegProgress(j_common_ptr c) {
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* e = reinterpret_cast<JpegErrors*>(c->err);
    std::snprintf(e->message, sizeof e->message, "JPEG: more than %d scans", kMaxJpegScans);
    longjmp(e->jump, 1);
  }
}

/// Inks to RGB as PIL converts CMYK: R = (255 - C)(255 - K) / 255. Adobe's
/// files (the APP14 marker) store the inks inverted.
inline unsigned char inkToLight(unsigned ink, unsigned black, bool inverted) {
  unsigned a = inverted ? ink : 255 - ink, b = inverted ? black : 255 - black;
  return static_cast<unsigned char>((a * b + 127) / 255);
}

/// PIL's convert("L"): ITU-R 601-2 luma in 16-bit fixed point.
inline unsigned char lumaOf(unsigned r, unsigned g, unsigned b) {
  return static_cast<unsigned char>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

/// Header only (out null) or the rectangle into `out`.
bool jpegDecode(const unsigned char* data, size_t size, int channels, int scale, int64_t x0,
                int64_t y0, int64_t width, int64_t height, ImageHeader* header, Pixels* out,
                std::string* error) {
  jpeg_decompress_struct cinfo;
  JpegErrors jerr;
  jpeg_progress_mgr progress;
  std::memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&jerr.mgr);
  jerr.mgr.error_exit = jpegFail;
  jerr.mgr.emit_message = jpegMessage;
  jerr.message[0] = '\0';
  if (setjmp(jerr.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return fail(error, jerr.message);
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = jpegProgress;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const int64_t w = cinfo.image_width, h = cinfo.image_height;
  const J_COLOR_SPACE space = cinfo.jpeg_color_space;
  const bool cmyk = space == JCS_CMYK || space == JCS_YCCK;
  // No C++ object with a destructor lives in this function (a longjmp back
  // to the setjmp above would skip it): messages go to jerr.message.
  if (w * h > kMaxImagePixels)
    std::snprintf(jerr.message, sizeof jerr.message, "%s", tooLarge(w, h).c_str());
  else if (space != JCS_GRAYSCALE && space != JCS_YCbCr && space != JCS_RGB && !cmyk)
    std::snprintf(jerr.message, sizeof jerr.message,
                  "JPEG: %d components of a color space the loader does not read",
                  cinfo.num_components);
  if (jerr.message[0] != '\0')
    longjmp(jerr.jump, 1);
  if (!out) {
    jpeg_destroy_decompress(&cinfo);
    header->format = ImageFormat::Jpeg;
    header->width = w;
    header->height = h;
    return true;
  }
  // Gray stays one channel (the loader replicates it); color becomes luma
  // in libjpeg (its Y, the same weights as PIL's) when one is asked for.
  const bool gray = space == JCS_GRAYSCALE || channels == 1;
  cinfo.out_color_space = cmyk ? JCS_CMYK : gray ? JCS_GRAYSCALE : JCS_RGB;
  cinfo.scale_num = static_cast<unsigned>(scale);
  cinfo.scale_denom = 8;
  cinfo.dct_method = JDCT_ISLOW; // PIL's and libjpeg's default: the accurate integer IDCT
  jpeg_start_decompress(&cinfo);
  const int64_t sw = cinfo.output_width, sh = cinfo.output_height;
  const int64_t rx = std::clamp<int64_t>(x0, 0, sw - 1), ry = std::clamp<int64_t>(y0, 0, sh - 1);
  const int64_t rw = std::clamp<int64_t>(width, 1, sw - rx),
                rh = std::clamp<int64_t>(height, 1, sh - ry);
  JDIMENSION xoff = static_cast<JDIMENSION>(rx), cw = static_cast<JDIMENSION>(rw);
  if (cw < cinfo.output_width) // whole iMCU columns around the rectangle
    jpeg_crop_scanline(&cinfo, &xoff, &cw);
  const int comps = cinfo.output_components;
  const size_t stride = static_cast<size_t>(cw) * static_cast<size_t>(comps);
  // Grown only: the buffer is reused from image to image, and zeroing the
  // part that grows would cost as much as decoding into it.
  if (out->data.size() < stride * static_cast<size_t>(rh))
    out->data.resize(stride * static_cast<size_t>(rh));
  if (ry > 0 &&
      jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(ry)) != static_cast<JDIMENSION>(ry)) {
    std::snprintf(jerr.message, sizeof jerr.message, "JPEG: cannot skip to row %lld",
                  static_cast<long long>(ry));
    longjmp(jerr.jump, 1);
  }
  while (cinfo.output_scanline < static_cast<JDIMENSION>(ry + rh)) {
    JSAMPROW row = out->data.data() + (cinfo.output_scanline - ry) * stride;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      std::snprintf(jerr.message, sizeof jerr.message, "JPEG: no row %u",
                    static_cast<unsigned>(cinfo.output_scanline));
      longjmp(jerr.jump, 1);
    }
  }
  const bool inverted = cinfo.saw_Adobe_marker;
  jpeg_destroy_decompress(&cinfo);

  out->x0 = xoff;
  out->y0 = ry;
  out->width = cw;
  out->height = rh;
  out->imageWidth = sw;
  out->imageHeight = sh;
  out->channels = cmyk ? (channels == 1 ? 1 : 3) : comps;
  if (cmyk) { // in place: every pixel shrinks from 4 bytes to 3 or 1
    unsigned char* p = out->data.data();
    const size_t n = static_cast<size_t>(cw) * static_cast<size_t>(rh);
    for (size_t k = 0; k < n; ++k) {
      const unsigned char* s = p + 4 * k;
      unsigned char r = inkToLight(s[0], s[3], inverted), g = inkToLight(s[1], s[3], inverted),
                    b = inkToLight(s[2], s[3], inverted);
      if (channels == 1) {
        p[k] = lumaOf(r, g, b);
      } else {
        p[3 * k] = r;
        p[3 * k + 1] = g;
        p[3 * k + 2] = b;
      }
    }
  }
  return true;
}

// --- PNG ------------------------------------------------------------------------

struct PngInput {
  const unsigned char* data;
  size_t size, at;
  char message[256];
};

void pngRead(png_structp png, png_bytep dst, size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > in->size - in->at)
    png_error(png, "truncated: the file ends inside a chunk");
  std::memcpy(dst, in->data + in->at, n);
  in->at += n;
}

[[noreturn]] void pngFail(png_structp png, png_const_charp message) {
  auto* in = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(in->message, sizeof in->message, "PNG: %s", message);
  png_longjmp(png, 1);
}

void pngWarning(png_structp, png_const_charp) {} // ancillary trouble: the pixels are whole

bool pngDecode(const unsigned char* data, size_t size, int channels, int64_t y0, int64_t height,
               ImageHeader* header, Pixels* out, std::string* error) {
  PngInput in{data, size, 0, "PNG: out of memory"};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, pngFail, pngWarning);
  if (!png)
    return fail(error, in.message);
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return fail(error, in.message);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return fail(error, in.message);
  }
  png_set_read_fn(png, &in, pngRead);
  png_set_user_limits(png, 1u << 16, 1u << 16);
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, type = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &type, &interlace, nullptr, nullptr);
  if (int64_t(w) * int64_t(h) > kMaxImagePixels) {
    std::snprintf(in.message, sizeof in.message, "%s", tooLarge(w, h).c_str());
    longjmp(png_jmpbuf(png), 1);
  }
  if (!out) {
    png_destroy_read_struct(&png, &info, nullptr);
    header->format = ImageFormat::Png;
    header->width = w;
    header->height = h;
    return true;
  }
  // PIL's convert("RGB") / ("L"): 16 bits keep their high byte, palettes
  // and low bit depths expand, alpha and tRNS are dropped, no gamma.
  const bool color = (type & PNG_COLOR_MASK_COLOR) != 0;
  if (depth == 16)
    png_set_strip_16(png);
  if (type == PNG_COLOR_TYPE_PALETTE)
    png_set_palette_to_rgb(png);
  else if (!color && depth < 8)
    png_set_expand_gray_1_2_4_to_8(png);
  // (Expanding a palette expands its tRNS chunk into alpha too.)
  if ((type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
    png_set_strip_alpha(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t rowBytes = png_get_rowbytes(png, info);
  const int comps = color ? 3 : 1;
  if (rowBytes != size_t(w) * size_t(comps)) {
    std::snprintf(in.message, sizeof in.message, "PNG: unexpected row of %zu bytes", rowBytes);
    longjmp(png_jmpbuf(png), 1);
  }
  const int64_t ry = std::clamp<int64_t>(y0, 0, int64_t(h) - 1);
  const int64_t rh = std::clamp<int64_t>(height, 1, int64_t(h) - ry);
  // The rectangle's rows, whole; other rows (read to reach them, or read
  // by every pass of an interlaced image) go to one scratch row at the end.
  if (out->data.size() < rowBytes * static_cast<size_t>(rh + 1))
    out->data.resize(rowBytes * static_cast<size_t>(rh + 1));
  unsigned char* scratch = out->data.data() + rowBytes * static_cast<size_t>(rh);
  const int64_t lastRow = passes > 1 ? int64_t(h) : ry + rh;
  for (int pass = 0; pass < passes; ++pass)
    for (int64_t y = 0; y < lastRow; ++y) {
      unsigned char* row = y >= ry && y < ry + rh
                               ? out->data.data() + rowBytes * static_cast<size_t>(y - ry)
                               : scratch;
      png_read_row(png, row, nullptr);
    }
  png_destroy_read_struct(&png, &info, nullptr);

  out->x0 = 0;
  out->y0 = ry;
  out->width = w;
  out->height = rh;
  out->imageWidth = w;
  out->imageHeight = h;
  out->channels = color && channels == 3 ? 3 : 1;
  const size_t n = size_t(w) * static_cast<size_t>(rh);
  unsigned char* p = out->data.data();
  if (color && channels == 1)
    for (size_t k = 0; k < n; ++k)
      p[k] = lumaOf(p[3 * k], p[3 * k + 1], p[3 * k + 2]);
  return true;
}

bool isJpeg(const unsigned char* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}
bool isPng(const unsigned char* data, size_t size) {
  return size >= 8 && std::memcmp(data, kPngSignature, 8) == 0;
}

/// Opens a regular file for reading without blocking (a FIFO or a device
/// under an image's name must not hang the loader). -1 with `error` set.
int openRegular(const std::string& path, struct stat& st, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    fail(error, std::string("cannot open: ") + std::strerror(errno));
    return -1;
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    fail(error, S_ISDIR(st.st_mode) ? "a folder, not an image file" : "not a regular file");
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Reads up to `n` bytes at `offset`; the count read, or -1 with errno.
ssize_t readAt(int fd, unsigned char* dst, size_t n, off_t offset) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, dst + got, n - got, offset + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -1;
    if (r == 0)
      break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

} // namespace

bool readImageHeader(const unsigned char* data, size_t size, ImageHeader& header,
                     std::string* error) {
  if (isJpeg(data, size))
    return jpegDecode(data, size, 3, 8, 0, 0, 0, 0, &header, nullptr, error);
  if (isPng(data, size))
    return pngDecode(data, size, 3, 0, 0, &header, nullptr, error);
  return fail(error, notAnImage(data, size));
}

bool decodeImage(const unsigned char* data, size_t size, int channels, int scaleEighths, int64_t x0,
                 int64_t y0, int64_t width, int64_t height, Pixels& out, std::string* error) {
  if (isJpeg(data, size))
    return jpegDecode(data, size, channels, scaleEighths, x0, y0, width, height, nullptr, &out,
                      error);
  if (isPng(data, size))
    return pngDecode(data, size, channels, y0, height, nullptr, &out, error);
  return fail(error, notAnImage(data, size));
}

bool readFileBytes(const std::string& path, std::vector<unsigned char>& bytes, std::string* error) {
  struct stat st;
  int fd = openRegular(path, st, error);
  if (fd < 0)
    return false;
  // Up to the size fstat gave, plus one byte to see a file that grew.
  const size_t want = static_cast<size_t>(st.st_size);
  bytes.resize(want + 1);
  ssize_t got = readAt(fd, bytes.data(), want + 1, 0);
  int saved = errno;
  ::close(fd);
  if (got < 0)
    return fail(error, std::string("read error: ") + std::strerror(saved));
  bytes.resize(static_cast<size_t>(got));
  return true;
}

bool checkImageFile(const std::string& path, ImageHeader& header, std::string* error) {
  struct stat st;
  int fd = openRegular(path, st, error);
  if (fd < 0)
    return false;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const size_t size = static_cast<size_t>(st.st_size);
  // The header: the first 64 KiB, or the whole file when markers or chunks
  // before the image data (Exif, ICC profiles) are longer.
  std::vector<unsigned char> head(std::min<size_t>(size, size_t(64) << 10));
  ssize_t got = readAt(fd, head.data(), head.size(), 0);
  if (got < 0)
    return fail(error, std::string("read error: ") + std::strerror(errno));
  head.resize(static_cast<size_t>(got));
  const bool jpeg = isJpeg(head.data(), head.size()), png = isPng(head.data(), head.size());
  if (!jpeg && !png)
    return fail(error, notAnImage(head.data(), head.size()));
  if (!readImageHeader(head.data(), head.size(), header, error)) {
    if (head.size() >= size)
      return false;
    head.resize(size);
    got = readAt(fd, head.data(), size, 0);
    if (got < 0)
      return fail(error, std::string("read error: ") + std::strerror(errno));
    head.resize(static_cast<size_t>(got));
    if (!readImageHeader(head.data(), head.size(), header, error))
      return false;
  }
  // The end: JPEG's end-of-image marker (FF D9, which entropy-coded data
  // never holds) or PNG's IEND chunk, within the last 4 KiB (some writers
  // pad or append a little after it).
  const size_t tailSize = std::min<size_t>(size, 4096);
  std::vector<unsigned char> tail(tailSize);
  got = readAt(fd, tail.data(), tailSize, static_cast<off_t>(size - tailSize));
  if (got != static_cast<ssize_t>(tailSize))
    return fail(error, "read error: the file shrank while read");
  static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  bool ended = false;
  if (jpeg) {
    for (size_t k = tailSize; k >= 2 && !ended; --k)
      ended = tail[k - 2] == 0xFF && tail[k - 1] == 0xD9;
  } else {
    for (size_t k = tailSize; k >= 12 && !ended; --k)
      ended = std::memcmp(tail.data() + k - 12, iend, 12) == 0;
  }
  if (!ended)
    return fail(error, std::string("truncated: no ") +
                           (jpeg ? "end-of-image marker (FF D9)" : "IEND chunk") +
                           " at the end of its " + std::to_string(size) + " bytes");
  return true;
}

} // namespace lwrt
