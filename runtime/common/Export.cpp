// The ONNX export writer: template pieces interleaved with the params'
// bytes, written atomically. See lwrt/export.h.
#include "lwrt/export.h"

#include "AtomicFile.h"

namespace lwrt {

namespace {

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
  if (std::string bad = checkCuts(templ, templBytes, cuts, params); !bad.empty())
    return path + ": cannot write ONNX export: " + bad;
  return writeFileAtomically(path, "ONNX export", [&](int fd) {
    uint64_t from = 0;
    for (const ExportCut& c : cuts) {
      int err = writeAll(fd, templ + from, static_cast<size_t>(c.offset - from));
      if (err == 0)
        err = writeAll(fd, static_cast<const unsigned char*>(params[c.param]),
                       static_cast<size_t>(c.bytes));
      if (err != 0)
        return err;
      from = c.offset;
    }
    return writeAll(fd, templ + from, static_cast<size_t>(templBytes - from));
  });
}

} // namespace lwrt
