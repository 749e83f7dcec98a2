// The atomic file writer. See AtomicFile.h.
#include "AtomicFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace lwrt {

std::string errnoText(int err) { return std::strerror(err); }

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

std::string writeFileAtomically(const std::string& path, const std::string& what,
                                const std::function<int(int fd)>& write,
                                const std::string& tmpSuffix) {
  const std::string tmp = path + tmpSuffix;
  auto fail = [&](const std::string& why) { return path + ": cannot write " + what + ": " + why; };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail("cannot create " + tmp + ": " + errnoText(errno));
  auto abandon = [&](const std::string& why) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(why);
  };
  if (int err = write(fd); err != 0)
    return abandon("writing " + tmp + ": " + errnoText(err));
  if (::fsync(fd) != 0)
    return abandon("syncing " + tmp + ": " + errnoText(errno));
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail("closing " + tmp + ": " + errnoText(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail("renaming " + tmp + ": " + errnoText(err));
  }
  // Make the rename durable. Some file systems cannot sync a folder (EINVAL).
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return fail("written, but cannot open folder " + dir + " to sync it: " + errnoText(errno));
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL)
    return fail("written, but syncing folder " + dir + " failed: " + errnoText(err));
  return "";
}

} // namespace lwrt
