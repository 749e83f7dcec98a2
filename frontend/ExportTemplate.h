//===- ExportTemplate.h - The input model, ready for trained weights -*- C++ -*-===//
//
// `--export=trained.onnx` makes a trainer write the model it was compiled
// from with its initializers replaced by the trained weights. Trainers do not
// link protobuf, so lwcc prepares an export template at compile time: the
// serialized ModelProto with the raw_data payload of every trained
// initializer cut out, and a table of cuts saying where each payload goes and
// which param fills it. The trainer writes the template's pieces interleaved
// with its params' bytes (lwrt::writeOnnxExport in lwrt/export.h).
//
// 1. Load the model as the importer does (binary, or .onnxtext), and split
//    its shared initializers as the importer does (SharedInitializers.h):
//    each copy becomes an initializer of its own, placed after its source,
//    the nodes read it, the Identity nodes it replaces are dropped, and so is
//    a source no node reads any more. The export then has one initializer
//    per param, under the names the nodes read.
// 2. Check every param against its initializer: same element type, same
//    element count. A name that is no initializer is an error naming it.
// 3. Rewrite each trained initializer to hold its data as raw_data (typed
//    fields and external data cleared) of the right size, all zeros; inline
//    the data of every other initializer stored externally, read from files
//    inside the model's folder only, so the export is one file.
// 4. Serialize, and find each trained payload by walking the protobuf wire
//    format: ModelProto.graph (7) -> GraphProto.initializer (5) ->
//    TensorProto.name (8) and TensorProto.raw_data (9).
// 5. Drop the payloads from the bytes; each cut's offset is where its payload
//    goes in the reduced bytes. The length prefixes stay: sizes do not change.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "frontend/SharedInitializers.h"
#include "ir/Types.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lwcc {

/// A trained param as the trainer holds it: the initializer it replaces, its
/// element type and element count (raw little-endian, row-major bytes).
struct ExportParamSpec {
  std::string name;
  DType dtype = DType::F32;
  int64_t numel = 0;
};

/// Where param #param's raw_data payload (`bytes` bytes) goes: at `offset`
/// of the template's bytes, before the template byte at that offset.
struct ExportCut {
  uint64_t offset = 0;
  uint32_t param = 0;
  uint64_t bytes = 0;
};

struct ExportTemplate {
  /// The serialized model without the trained payloads.
  std::string bytes;
  /// Ascending offsets, one per param with a nonempty payload, in the order
  /// of the graph's initializers.
  std::vector<ExportCut> cuts;
};

/// Builds the export template of the model at `modelPath` for `params`
/// (ExportCut::param indexes `params`), its shared initializers split as the
/// importer split them with `tied`. Errors name the file and the param or
/// initializer.
llvm::Expected<ExportTemplate> buildExportTemplate(const std::string& modelPath,
                                                   const std::vector<ExportParamSpec>& params,
                                                   const TiedChoice& tied = {});

/// The metadata_props key that the template sets to the model's file name.
inline constexpr const char* kExportedFromKey = "lwcc.exported_from";

} // namespace lwcc
