// The ONNX export writer: template pieces interleaved with the params'
// bytes, written atomically. See lwrt/export.h.
#include "lwrt/export.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace lwrt {

namespace {

std::string errnoText(int err) { return std::strerror(err); }

std::string folderOf(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

/// Writes all of [p, p+size) to `fd`; 0 or an errno.
int writeAll(int fd, const unsigned char* p, size_t size) {
  while (size > 0) {
    // Some kernels cap one write at about 2 GiB.
    size_t chunk = size < (size_t(1) << 30) ? size : (size_t(1) << 30);
    ssize_t n = ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (n == 0)
      return EIO;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

/// "" when the cut table fits the template and the params, else why not.
std::string checkCuts(const unsigned char* templ, size_t templBytes,
                      const std::vector<ExportCut>& cuts, const std::vector<const void*>& params) {
  if (templBytes > 0 && !templ)
    return "the template has " + std::to_string(templBytes) + " bytes but no data";
  uint64_t prev = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const ExportCut& c = cuts[i];
    std::string where = "cut #" + std::to_string(i) + " (offset " + std::to_string(c.offset) +
                        ", param #" + std::to_string(c.param) + ")";
    if (c.offset > templBytes)
      return where + " is past the end of the " + std::to_string(templBytes) + "-byte template";
    if (c.offset < prev)
      return where + " comes before the previous cut's offset " + std::to_string(prev) +
             "; offsets must ascend";
    if (c.param >= params.size())
      return where + " names a param out of range (there are " + std::to_string(params.size()) +
             ")";
    if (c.bytes > 0 && !params[c.param])
      return where + " has a null param pointer";
    prev = c.offset;
  }
  return "";
}

} // namespace

std::string writeOnnxExport(const std::string& path, const unsigned char* templ, size_t templBytes,
                            const std::vector<ExportCut>& cuts,
                            const std::vector<const void*>& params) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) { return path + ": cannot write ONNX export: " + what; };
  if (std::string bad = checkCuts(templ, templBytes, cuts, params); !bad.empty())
    return fail(bad);

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail("cannot create " + tmp + ": " + errnoText(errno));
  auto abandon = [&](const std::string& what) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(what);
  };

  uint64_t from = 0;
  int err = 0;
  for (const ExportCut& c : cuts) {
    err = writeAll(fd, templ + from, static_cast<size_t>(c.offset - from));
    if (err == 0)
      err = writeAll(fd, static_cast<const unsigned char*>(params[c.param]),
                     static_cast<size_t>(c.bytes));
    if (err != 0)
      break;
    from = c.offset;
  }
  if (err == 0)
    err = writeAll(fd, templ + from, static_cast<size_t>(templBytes - from));
  if (err != 0)
    return abandon("writing " + tmp + ": " + errnoText(err));
  if (::fsync(fd) != 0)
    return abandon("syncing " + tmp + ": " + errnoText(errno));
  if (::close(fd) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return fail("closing " + tmp + ": " + errnoText(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return fail("renaming " + tmp + ": " + errnoText(err));
  }
  // Make the rename durable. Some file systems cannot sync a folder (EINVAL).
  const std::string dir = folderOf(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return fail("written, but cannot open folder " + dir + " to sync it: " + errnoText(errno));
  int rc = ::fsync(dfd);
  err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL)
    return fail("written, but syncing folder " + dir + " failed: " + errnoText(err));
  return "";
}

} // namespace lwrt
