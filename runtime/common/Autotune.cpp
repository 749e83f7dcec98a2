// The autotune cache (lwrt/autotune.h): its file, a checkpoint's pins.
#include "lwrt/autotune.h"

#include "AtomicFile.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace lwrt {

namespace {

using Entries = std::map<std::pair<std::string, std::string>, std::string>;

/// Parses lines of "DEVICE\tCONFIGURATION\tCHOICE" into `out`; `what`
/// names the source in errors ("PATH:LINE: ...").
bool parse(std::istream& in, const std::string& what, Entries& out, std::string* error) {
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty() || line[0] == '#')
      continue;
    size_t a = line.find('\t'), b = a == std::string::npos ? a : line.find('\t', a + 1);
    if (b == std::string::npos || line.find('\t', b + 1) != std::string::npos || a == 0 ||
        b == a + 1 || b + 1 == line.size()) {
      if (error)
        *error = what + ":" + std::to_string(n) +
                 ": not an autotune choice (DEVICE, CONFIGURATION and CHOICE separated by "
                 "tabs); delete the line or the file and the run times that configuration again";
      return false;
    }
    out[{line.substr(0, a), line.substr(a + 1, b - a - 1)}] = line.substr(b + 1);
  }
  return true;
}

bool readEntries(const std::string& path, Entries& out, std::string* error) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return true;
  std::ifstream in(path);
  if (!in) {
    if (error)
      *error = path + ": cannot read the autotune cache: " + errnoText(errno);
    return false;
  }
  return parse(in, path, out, error);
}

std::string format(const Entries& entries) {
  std::string text;
  for (const auto& [key, choice] : entries)
    text += key.first + "\t" + key.second + "\t" + choice + "\n";
  return text;
}

const char* kHeader = "# lwcc autotune cache: DEVICE, CONFIGURATION and the CHOICE timed fastest "
                      "on it, tab-separated\n";

} // namespace

const char* autotuneModeName(AutotuneMode m) {
  switch (m) {
  case AutotuneMode::Off:
    return "off";
  case AutotuneMode::Cache:
    return "cache";
  case AutotuneMode::Timed:
    return "timed";
  case AutotuneMode::Default:
    break;
  }
  return "default";
}

bool AutotuneCache::open(const std::string& path, std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_ && path == path_)
    return true;
  Entries entries;
  if (!readEntries(path, entries, error))
    return false;
  path_ = path;
  file_ = std::move(entries);
  open_ = true;
  return true;
}

bool AutotuneCache::isOpen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

std::string AutotuneCache::path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return path_;
}

std::optional<std::string> AutotuneCache::find(const std::string& device,
                                               const std::string& config) {
  std::lock_guard<std::mutex> lock(mu_);
  Key key{device, config};
  auto it = pinned_.find(key);
  if (it == pinned_.end()) {
    it = file_.find(key);
    if (it == file_.end())
      return std::nullopt;
  }
  used_[key] = it->second;
  ++found_;
  return it->second;
}

std::string AutotuneCache::record(const std::string& device, const std::string& config,
                                  const std::string& choice, std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error)
    error->clear();
  Key key{device, config};
  if (auto first = used_.find(key); first != used_.end())
    return first->second; // another device of this run was first
  used_[key] = choice;
  file_[key] = choice;
  ++timed_;
  if (!open_)
    return choice;
  // The file as it is now (another process may have added choices), with
  // this choice (over one another process wrote for it meanwhile) and the
  // ones read at open that it lacks.
  Entries now;
  std::string ignored;
  if (!readEntries(path_, now, &ignored))
    now.clear(); // unreadable or malformed since it was opened: rewritten whole
  for (const auto& [k, v] : file_)
    now.emplace(k, v);
  now[key] = choice;
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty())
    std::filesystem::create_directories(parent, ec);
  std::string text = kHeader + format(now);
  // A temporary file of this process's own: the ranks of an mpirun on one
  // machine may write the cache at once, each renaming a whole file.
  std::string failed = writeFileAtomically(
      path_, "the autotune cache",
      [&](int fd) {
        return writeAll(fd, reinterpret_cast<const unsigned char*>(text.data()), text.size());
      },
      ".tmp." + std::to_string(::getpid()));
  if (!failed.empty() && error)
    *error = failed;
  return choice;
}

void AutotuneCache::drop(const std::string& device, const std::string& config) {
  std::lock_guard<std::mutex> lock(mu_);
  Key key{device, config};
  pinned_.erase(key);
  file_.erase(key);
  used_.erase(key);
  --found_;
}

std::string AutotuneCache::usedText() const {
  std::lock_guard<std::mutex> lock(mu_);
  return format(used_);
}

bool AutotuneCache::pin(const std::string& text, const std::string& what, std::string* error) {
  std::istringstream in(text);
  Entries entries;
  if (!parse(in, what, entries, error))
    return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [k, v] : entries)
    pinned_[k] = std::move(v);
  return true;
}

int AutotuneCache::found() const {
  std::lock_guard<std::mutex> lock(mu_);
  return found_;
}

int AutotuneCache::timed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timed_;
}

AutotuneCache& autotuneCache() {
  static AutotuneCache cache;
  return cache;
}

std::string defaultAutotuneCachePath() {
  if (const char* p = std::getenv("LWCC_AUTOTUNE_CACHE"); p && *p)
    return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p && *p)
    return std::string(p) + "/lwcc/autotune.tsv";
  if (const char* p = std::getenv("HOME"); p && *p)
    return std::string(p) + "/.cache/lwcc/autotune.tsv";
  return "";
}

} // namespace lwrt
