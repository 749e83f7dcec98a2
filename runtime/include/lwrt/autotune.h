// lwrt/autotune.h - the autotune cache: kernel choices made by timing, kept across runs
// defines: AutotuneMode, AutotuneCache, autotuneCache, defaultAutotuneCachePath
//
// A CUDA trainer chooses each convolution configuration's algorithm (cuDNN's
// legacy API) or engine (its graph API) at the configuration's first call.
// Timing the candidates finds the fastest, but timings vary, so two runs
// that each time them may choose differently and compute different bits.
// The cache makes the fast choice repeatable: the first run on a GPU times
// the candidates of each configuration it meets and writes the fastest to a
// file; later runs, and resumed runs, read the file and take the same
// algorithms without timing, so they are bit-identical to each other.
//
// The file is text, one choice a line, three fields separated by tabs:
//   DEVICE <tab> CONFIGURATION <tab> CHOICE
// DEVICE names the GPU, its architecture and the cuDNN and cuBLAS versions
// (a choice holds only for those), CONFIGURATION the call (direction,
// types, shapes, alignment, API), CHOICE what was chosen ("legacy algo=1
// math=1", "graph engine=0", ...). Lines starting with '#' and empty lines
// are skipped. One file serves several GPUs and library versions: lines of
// another DEVICE are kept as they are.
//
// A checkpoint records the choices its run used (usedText), and a resumed
// run takes them before the file's (pin), so a resume computes what the
// run it continues computed even where the file has changed or is gone.
//
// Writing (record) reads the file again (other processes may have added
// choices), sets the new choice and replaces the file atomically (a
// temporary file of the process's own, PATH.tmp.PID, renamed over it): where two processes time the same configuration at
// once, the choice written last stays, and every run after them takes it. The cache is shared by
// every device thread of the process; all members are thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace lwrt {

enum class AutotuneMode {
  Default, ///< Cache on a GPU, Off on the emulated device (runner's choice)
  Off,     ///< the libraries' heuristics, untimed: the same in every run
  Cache,   ///< timed once per GPU and configuration, then read from the cache
  Timed,   ///< timed in every run, no cache (--cudnn-benchmark)
};

/// "off", "cache", "timed".
const char* autotuneModeName(AutotuneMode m);

class AutotuneCache {
public:
  /// Reads the cache file at `path` (a file that does not exist is an
  /// empty cache; it is created at the first record). False with `error`
  /// ("PATH:LINE: what") when the file cannot be read or a line is not
  /// three tab-separated fields. Opening twice with the same path does
  /// nothing.
  bool open(const std::string& path, std::string* error);
  bool isOpen() const;
  std::string path() const;

  /// The choice for `config` on `device`: a pinned one (a checkpoint's)
  /// first, then the file's. Marks it used.
  std::optional<std::string> find(const std::string& device, const std::string& config);
  /// A choice this run made by timing: kept, marked used and written to
  /// the file (see above), unless another device thread of this run took
  /// one for the configuration first (devices that time the same
  /// configuration at once): returns the choice in effect, that one or
  /// `choice`, which the caller takes, so that every device of the run
  /// computes what later runs will. `error` is set ("" otherwise) when the
  /// file cannot be written; the choice still holds for this run.
  std::string record(const std::string& device, const std::string& config,
                     const std::string& choice, std::string* error);
  /// Forgets a choice the configuration could not take (an algorithm the
  /// library no longer offers): the next find returns nothing.
  void drop(const std::string& device, const std::string& config);

  /// The choices this run used, as lines of the file's form (a
  /// checkpoint's record).
  std::string usedText() const;
  /// Takes the choices of `text` (usedText's form, from a checkpoint) before
  /// the file's. False with `error` ("WHAT:LINE: ...") on a malformed line.
  bool pin(const std::string& text, const std::string& what, std::string* error);

  /// What the runs' configurations got: from the cache or a checkpoint,
  /// and timed (then recorded).
  int found() const;
  int timed() const;

private:
  using Key = std::pair<std::string, std::string>; // device, configuration
  mutable std::mutex mu_;
  std::string path_;
  bool open_ = false;
  std::map<Key, std::string> file_, pinned_, used_;
  int found_ = 0, timed_ = 0;
};

/// The process's cache.
AutotuneCache& autotuneCache();

/// $LWCC_AUTOTUNE_CACHE, else $XDG_CACHE_HOME/lwcc/autotune.tsv, else
/// $HOME/.cache/lwcc/autotune.tsv; "" when none of them is set.
std::string defaultAutotuneCachePath();

} // namespace lwrt
