//===- Frontend.h - ONNX models into lwcc modules --------------*- C++ -*-===//
//
// Reads an ONNX model (binary ModelProto, or ONNX's textual syntax in a
// .onnxtext file), checks it, and imports it into a Module: one graph with
// static shapes and the initial values of its params. Every error names the
// file and, where there is one, the node (name, op_type, domain, opset).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "frontend/SharedInitializers.h"
#include "ir/Module.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace onnx {
class ModelProto;
class TensorProto;
} // namespace onnx

namespace lwcc {

/// The default-domain opsets the importer accepts.
constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 23;

struct ImportOptions {
  /// Value for symbolic leading (batch) dims of the graph inputs.
  std::optional<int64_t> batch;
  /// Float initializers that several nodes read (SharedInitializers.h).
  TiedChoice tied;
  /// Receives warnings about the model (e.g. batch norm folded away).
  DiagHandler diag;
  /// The float initializers' values read into Module::weights. Without,
  /// each is checked (its bytes against its shape, its external file) and
  /// becomes a param with no weights entry: a compile that only plans and
  /// prints needs none, and a large model's values are most of its import
  /// (they are held as doubles: twice a float32 file's bytes).
  bool weights = true;
};

/// The graph initializers whose raw data loadModelProto left in the file:
/// each one's byte range in `file`.
struct UnreadRawData {
  std::string file;
  std::unordered_map<const onnx::TensorProto*, std::pair<int64_t, int64_t>> at;
};

/// Reads `path`: ONNX text when it ends in .onnxtext, a binary ModelProto
/// otherwise. With `unread`, the graph initializers' large raw data (a
/// model's weights, most of its file) is not read: the file is mapped,
/// its fields but those copied, and where each raw data lies recorded.
llvm::Error loadModelProto(const std::string& path, onnx::ModelProto& model,
                           UnreadRawData* unread = nullptr);

/// Imports a model read from `path` (which also names the folder that
/// external tensor data must stay inside); `unread`: what loadModelProto
/// left in the file.
llvm::Expected<Module> importModel(const onnx::ModelProto& model, const std::string& path,
                                   const ImportOptions& opts = {},
                                   const UnreadRawData* unread = nullptr);
llvm::Expected<Module> importFile(const std::string& path, const ImportOptions& opts = {});

/// A TensorProto's values. External data is read from files inside
/// `modelDir` only. `what` names the tensor in messages.
llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto& t, const std::string& modelDir,
                                       const std::string& what);
/// The type of `t`'s values, checked as tensorFromProto checks them (its
/// element type and dims, the bytes of its raw or external data or the count
/// of its typed values against them) without reading them; with
/// `unreadRawBytes`, its raw data of that many bytes was left unread.
llvm::Expected<TensorType>
tensorTypeFromProto(const onnx::TensorProto& t, const std::string& modelDir,
                    const std::string& what, std::optional<int64_t> unreadRawBytes = std::nullopt);
/// The raw bytes of `t`'s external data, read from a file inside `modelDir`
/// (a relative location, no "..", no link that leaves the folder, inside the
/// file's size); errors start with `what`.
llvm::Expected<std::string> readExternalData(const onnx::TensorProto& t,
                                             const std::string& modelDir, const std::string& what);
/// Reads a TensorProto file (input_0.pb and the like).
llvm::Expected<Tensor> readTensorFile(const std::string& path);
/// Writes `t` as a TensorProto file named `name` inside.
llvm::Error writeTensorFile(const Tensor& t, const std::string& name, const std::string& path);

/// The lwcc element type of an ONNX TensorProto data type, if it has one.
std::optional<DType> dtypeFromOnnx(int onnxType);
/// The ONNX TensorProto data type of an lwcc element type.
int dtypeToOnnx(DType t);

/// The ONNX op types the importer handles, sorted.
std::vector<std::string> supportedOnnxOps();

} // namespace lwcc
