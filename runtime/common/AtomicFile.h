// Files written whole or not at all: the checkpoint and the ONNX export
// write through writeFileAtomically, so a crash or a full disk leaves the
// previous file in place.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace lwrt {

/// strerror's text for `err`.
std::string errnoText(int err);

/// Writes all of [p, p+size) to `fd`; 0 or an errno.
int writeAll(int fd, const unsigned char* p, size_t size);

/// Writes `path` atomically: `write` fills a new file beside it (PATH.tmp,
/// or PATH + tmpSuffix where several processes may write `path` at once)
/// and returns 0 or an errno; the file is synced, renamed over `path`, and
/// the rename synced. "" when written, else "PATH: cannot write WHAT: why".
std::string writeFileAtomically(const std::string& path, const std::string& what,
                                const std::function<int(int fd)>& write,
                                const std::string& tmpSuffix = ".tmp");

} // namespace lwrt
