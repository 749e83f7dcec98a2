// lwrt/export.h - writing the trained model as an ONNX file, without protobuf
// defines: ExportCut, writeOnnxExport
//
// lwcc prepares an export template at compile time (frontend/ExportTemplate.h):
// the input model serialized with the raw_data payload of every trained
// initializer cut out, and a table of cuts, one per such payload. The
// protobuf length prefix of each payload stays in the template: a payload
// has the same size as before, so every other byte is already right. The
// file is
//   templ[0, cut0.offset) params[cut0.param][0, cut0.bytes)
//   templ[cut0.offset, cut1.offset) params[cut1.param][0, cut1.bytes) ...
//   templ[last.offset, templBytes)
// where each param is raw, row-major, little-endian host memory (the
// trainer's layout of a tensor, which is ONNX's raw_data layout).
//
// Writing is atomic: to `<path>.tmp`, fsynced, renamed over `<path>`, and the
// folder fsynced; a failure leaves `<path>` as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lwrt {

/// Param #param's payload of `bytes` bytes goes at `offset` of the template
/// (before the template byte at that offset).
struct ExportCut {
  uint64_t offset = 0;
  uint32_t param = 0;
  uint64_t bytes = 0;
};

/// Writes the ONNX export to `path` (see above). Cuts must have ascending
/// offsets inside the template and param indices inside `params`; a param
/// with a nonempty payload must not be null. Returns "" on success, else a
/// message naming the file (nothing is written when the cut table is bad).
std::string writeOnnxExport(const std::string& path, const unsigned char* templ, size_t templBytes,
                            const std::vector<ExportCut>& cuts,
                            const std::vector<const void*>& params);

} // namespace lwrt
