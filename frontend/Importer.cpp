//===- Importer.cpp - ONNX ModelProto -> Module ---------------------------===//
//
// 1. Read the file (binary protobuf, or ONNX text for .onnxtext).
// 2. Find the default-domain opset and check it is one lwcc supports.
// 3. Split the float initializers that several nodes read into one param
//    per consumer (SharedInitializers.h); warn when the model looks exported
//    with batch norm folded away.
// 4. Bind the graph inputs (fixing symbolic batch dims with --batch), then
//    the initializers: float ones become params, small integer ones become
//    constants so that shape computations fold.
// 5. Order the nodes topologically, reporting undefined names and cycles.
// 6. Import each node with the importer registered for (op_type, opset).
// 7. Bind the outputs, check them against the declared output shapes, and
//    verify. What no output needs stays: the driver's dce removes it
//    (eliminateDeadCode, passes/Pass.h).
//
//===----------------------------------------------------------------------===//
#include "frontend/Frontend.h"
#include "frontend/ImportContext.h"
#include "ir/Verifier.h"
#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <unistd.h>

namespace lwcc {

namespace fs = std::filesystem;

namespace {

/// Names of the graph's inputs and values that the dynamo exporter marks as
/// non-persistent buffers of the PyTorch module (value metadata
/// "pkg.torch.export.graph_signature.InputSpec.kind" BUFFER with "...persistent"
/// False): derived state such as shifted-window attention masks, which is no
/// parameter. The metadata is ValueInfoProto field 4 (IR version 10), read from
/// the unknown fields of the older ONNX protos lwcc may be built with.
std::set<std::string> nonPersistentBuffers(const onnx::GraphProto& graph) {
  constexpr int kValueInfoMetadataProps = 4;
  const std::string kKind = "pkg.torch.export.graph_signature.InputSpec.kind";
  const std::string kPersistent = "pkg.torch.export.graph_signature.InputSpec.persistent";
  std::set<std::string> names;
  auto scan = [&](const onnx::ValueInfoProto& vi) {
    const google::protobuf::UnknownFieldSet& fields = vi.unknown_fields();
    bool buffer = false, transient = false;
    for (int i = 0; i < fields.field_count(); ++i) {
      const google::protobuf::UnknownField& f = fields.field(i);
      if (f.number() != kValueInfoMetadataProps ||
          f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
        continue;
      onnx::StringStringEntryProto entry;
      if (!entry.ParseFromString(f.length_delimited()))
        continue;
      if (entry.key() == kKind)
        buffer = entry.value() == "BUFFER";
      else if (entry.key() == kPersistent)
        transient = entry.value() == "False";
    }
    if (buffer && transient)
      names.insert(vi.name());
  };
  for (const auto& vi : graph.input())
    scan(vi);
  for (const auto& vi : graph.value_info())
    scan(vi);
  return names;
}

/// Integer initializers up to this size become constants (shape data).
constexpr int64_t kMaxIntConstant = 1 << 16;

llvm::Error fileError(const std::string& file, const std::string& msg) {
  return makeError(Location{file, 0, 0, ""}, msg);
}

/// The static type of a graph input or output. Symbolic leading dims take
/// `batch`; other unresolved dims are errors naming them.
llvm::Expected<TensorType> valueInfoType(const onnx::ValueInfoProto& vi, const std::string& file,
                                         std::optional<int64_t> batch, bool isInput) {
  const char* what = isInput ? "input" : "output";
  if (!vi.type().has_tensor_type())
    return fileError(file, llvm::formatv("graph {0} '{1}' is not a tensor", what, vi.name()).str());
  const auto& tt = vi.type().tensor_type();
  std::optional<DType> dt = dtypeFromOnnx(tt.elem_type());
  if (!dt)
    return fileError(file, llvm::formatv("graph {0} '{1}' has element type {2}, which lwcc does "
                                         "not support",
                                         what, vi.name(), tt.elem_type())
                               .str());
  if (!tt.has_shape())
    return fileError(file, llvm::formatv("graph {0} '{1}' has no shape; lwcc needs static shapes",
                                         what, vi.name())
                               .str());
  Shape shape;
  std::vector<std::string> unresolved;
  // As the IR parser does: at most 2^48 elements, not counting zero dims, so
  // that no size computation wraps.
  constexpr int64_t kMaxElements = int64_t{1} << 48;
  int64_t elements = 1;
  for (int k = 0; k < tt.shape().dim_size(); ++k) {
    const auto& d = tt.shape().dim(k);
    if (d.has_dim_value()) {
      if (d.dim_value() < 0 || d.dim_value() > (int64_t{1} << 40))
        return fileError(file, llvm::formatv("graph {0} '{1}' has an invalid dim {2} at axis {3}",
                                             what, vi.name(), d.dim_value(), k)
                                   .str());
      shape.push_back(d.dim_value());
    } else if (k == 0 && batch) {
      shape.push_back(*batch);
    } else {
      std::string name = d.has_dim_param() && !d.dim_param().empty() ? "'" + d.dim_param() + "'"
                                                                     : "an unnamed dim";
      unresolved.push_back(name + " at axis " + std::to_string(k));
      shape.push_back(-1);
    }
  }
  for (int64_t d : shape) {
    if (d <= 0)
      continue;
    if (elements > kMaxElements / d)
      return fileError(file, llvm::formatv("graph {0} '{1}' has the shape {2}, which has too many "
                                           "elements",
                                           what, vi.name(), shapeStr(shape))
                                 .str());
    elements *= d;
  }
  if (!unresolved.empty()) {
    std::string list;
    for (const std::string& u : unresolved)
      list += (list.empty() ? "" : ", ") + u;
    if (!isInput)
      return TensorType(*dt, shape); // checked only where static
    return fileError(file, llvm::formatv("graph input '{0}' has unresolved dims: {1}; lwcc needs "
                                         "static shapes (--batch=N fixes a symbolic leading dim)",
                                         vi.name(), list)
                               .str());
  }
  return TensorType(*dt, shape);
}

std::string supportedList() {
  std::string s;
  for (const std::string& op : supportedOnnxOps())
    s += (s.empty() ? "" : ", ") + op;
  return s;
}

} // namespace

llvm::Error loadModelProto(const std::string& path, onnx::ModelProto& model) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return fileError(path, fs::exists(path, ec) ? "not a regular file" : "no such file");
  if (llvm::StringRef(path).endswith(".onnxtext")) {
    auto file = llvm::MemoryBuffer::getFile(path);
    if (!file)
      return fileError(path, "cannot read: " + file.getError().message());
    onnx::OnnxParser parser((*file)->getBufferStart()); // null-terminated
    auto status = parser.Parse(model);
    if (!status.IsOK())
      return fileError(path, "cannot parse ONNX text: " + status.ErrorMessage());
    return llvm::Error::success();
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec)
    return fileError(path, "cannot read: " + ec.message());
  if (size == 0)
    return fileError(path, "empty file; expected an ONNX model");
  if (size > static_cast<uintmax_t>(std::numeric_limits<int>::max()))
    return fileError(path, "larger than 2 GiB, a protobuf's limit (a model this large keeps "
                           "its weights in external data files)");
  // Parsed as it is read, in blocks: a large model's file is mostly its
  // weights, held once (in the parsed tensors), not twice.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fileError(path, std::string("cannot read: ") + std::strerror(errno));
  const bool parsed = model.ParseFromFileDescriptor(fd);
  ::close(fd);
  if (!parsed)
    return fileError(path, "not a valid ONNX model (the protobuf does not parse: truncated or "
                           "not ONNX)");
  return llvm::Error::success();
}

llvm::Expected<Module> importModel(const onnx::ModelProto& model, const std::string& path,
                                   const ImportOptions& opts) {
  const std::string& file = path;
  std::string dir = fs::path(path).parent_path().string();
  if (!model.has_graph())
    return fileError(file, "the model has no graph (not an ONNX model?)");
  const onnx::GraphProto& graph = model.graph();

  // Opset.
  std::optional<int64_t> opset;
  for (const auto& imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (!opset)
    return fileError(file, "the model imports no opset of the default domain (ai.onnx)");
  if (*opset < kMinOpset || *opset > kMaxOpset)
    return fileError(file, llvm::formatv("opset {0} of ai.onnx is not supported (lwcc supports "
                                         "{1} to {2})",
                                         *opset, kMinOpset, kMaxOpset)
                               .str());

  Module module;
  module.graph = std::make_unique<Graph>(graph.name().empty() ? "main" : graph.name());
  ImportContext ctx(module, file, *opset);

  std::map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& init : graph.initializer()) {
    if (init.name().empty())
      return fileError(file, "an initializer has no name");
    if (!initializers.emplace(init.name(), &init).second)
      return fileError(file, "initializer '" + init.name() + "' is defined twice");
  }
  if (graph.sparse_initializer_size())
    return fileError(file, "sparse initializers are not supported");

  // Shared initializers: each copy starts from its source's value; the nodes
  // below are the graph's after the split.
  InitializerSplit split = planInitializerSplit(graph, opts.tied);
  RewrittenNodes rewritten = applyInitializerSplit(graph, split);
  for (const InitializerSplit::Copy& c : split.copies)
    initializers.emplace(c.name, initializers.at(c.source));
  const std::vector<const onnx::NodeProto*>& nodes = rewritten.nodes;
  if (opts.diag)
    if (std::string w = exportedTrainingWarning(model); !w.empty())
      opts.diag(Severity::Warning, Location{file, 0, 0, ""}, w);

  // Inputs that are not initializers (old exporters list both).
  std::set<std::string> defined;
  for (const auto& in : graph.input()) {
    if (initializers.count(in.name()))
      continue;
    if (!defined.insert(in.name()).second)
      return fileError(file, "graph input '" + in.name() + "' is listed twice");
    auto type = valueInfoType(in, file, opts.batch, true);
    if (!type)
      return type.takeError();
    ctx.bind(in.name(), module.graph->addInput(in.name(), *type, InputRole::Data));
  }
  const std::set<std::string> buffers = nonPersistentBuffers(graph);
  auto addParam = [&](const std::string& name, const TensorType& type) {
    Value* p = module.graph->addParam(name, name, type);
    // A non-persistent buffer keeps its value: no gradient, no update.
    if (buffers.count(name))
      p->setFrozen(true);
    ctx.bind(name, p);
  };
  for (const auto& [name, proto] : initializers) {
    const std::string what = "initializer '" + name + "'";
    // Float values not asked for: checked, not read.
    if (std::optional<DType> dt = dtypeFromOnnx(proto->data_type());
        !opts.weights && dt && isFloat(*dt)) {
      auto type = tensorTypeFromProto(*proto, dir, what);
      if (!type)
        return makeError(Location{file, 0, 0, ""}, llvm::toString(type.takeError()));
      defined.insert(name);
      addParam(name, *type);
      ctx.deferValues(name,
                      [proto = proto, &dir, what] { return tensorFromProto(*proto, dir, what); });
      continue;
    }
    auto t = tensorFromProto(*proto, dir, what);
    if (!t)
      return makeError(Location{file, 0, 0, ""}, llvm::toString(t.takeError()));
    defined.insert(name);
    if (!t->isFloatData() && t->size() <= kMaxIntConstant) {
      Value* c = ctx.constant(*t);
      c->setName(name);
      ctx.bind(name, c);
    } else {
      addParam(name, t->type);
      module.weights.emplace(name, std::move(*t));
    }
  }

  // Topological order (ONNX requires it, but not every exporter obeys).
  const int n = static_cast<int>(nodes.size());
  std::map<std::string, int> producer;
  for (int k = 0; k < n; ++k)
    for (const std::string& out : nodes[k]->output()) {
      if (out.empty())
        continue;
      if (defined.count(out) || !producer.emplace(out, k).second)
        return fileError(file, llvm::formatv("tensor '{0}' is defined twice (node '{1}', {2})", out,
                                             nodes[k]->name(), nodes[k]->op_type())
                                   .str());
    }
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> consumers(n);
  for (int k = 0; k < n; ++k) {
    std::set<int> deps;
    for (const std::string& in : nodes[k]->input()) {
      if (in.empty() || defined.count(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return fileError(file, llvm::formatv("node '{0}' ({1}) uses tensor '{2}', which nothing "
                                             "defines",
                                             nodes[k]->name(), nodes[k]->op_type(), in)
                                   .str());
      deps.insert(it->second);
    }
    pending[k] = static_cast<int>(deps.size());
    for (int d : deps)
      consumers[d].push_back(k);
  }
  std::vector<int> order;
  std::set<int> ready;
  for (int k = 0; k < n; ++k)
    if (pending[k] == 0)
      ready.insert(k);
  while (!ready.empty()) {
    int k = *ready.begin(); // lowest index first: keep the file's order
    ready.erase(ready.begin());
    order.push_back(k);
    for (int c : consumers[k])
      if (--pending[c] == 0)
        ready.insert(c);
  }
  if (static_cast<int>(order.size()) != n) {
    for (int k = 0; k < n; ++k)
      if (pending[k] > 0)
        return fileError(file, llvm::formatv("node '{0}' ({1}) is part of a cycle",
                                             nodes[k]->name(), nodes[k]->op_type())
                                   .str());
  }

  // Names some node or the graph reads: an output nobody reads (MaxPool's
  // Indices, as some exporters leave it) need not be produced.
  std::set<std::string> consumed;
  for (const onnx::NodeProto* node : nodes)
    consumed.insert(node->input().begin(), node->input().end());
  for (const auto& out : graph.output())
    consumed.insert(out.name());
  ctx.setConsumed(std::move(consumed));

  for (int k : order) {
    const onnx::NodeProto& node = *nodes[k];
    ctx.setNode(&node);
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      return ctx.error("domain '" + node.domain() + "' is not supported (lwcc supports ai.onnx)");
    ImportFn fn = findImporter(node.op_type(), *opset);
    if (!fn)
      return ctx.error("op type '" + node.op_type() + "' is not supported at this opset; " +
                       "supported: " + supportedList());
    // Importers report through ctx.error; an error from elsewhere (a tensor
    // attribute that does not decode) still gets the file and the node.
    if (llvm::Error e = fn(ctx))
      return llvm::handleErrors(
          std::move(e), [&](const llvm::StringError& se) { return ctx.error(se.getMessage()); });
    for (int o = 0; o < node.output_size(); ++o)
      if (!node.output(o).empty() && !ctx.lookup(node.output(o)) &&
          !ctx.lookupSequence(node.output(o)) && ctx.outputUsed(o))
        return ctx.error(
            llvm::formatv("output #{0} ('{1}') is not supported", o, node.output(o)).str());
  }

  for (const auto& out : graph.output()) {
    Value* v = ctx.lookup(out.name());
    if (!v)
      return fileError(file, "graph output '" + out.name() + "' is not defined");
    module.graph->addOutput(v);
    if (!out.type().has_tensor_type())
      continue; // nothing declared to check against
    const auto& tt = out.type().tensor_type();
    if (!tt.has_shape()) {
      // Only the element type is declared (if that).
      std::optional<DType> dt = dtypeFromOnnx(tt.elem_type());
      if (tt.elem_type() != onnx::TensorProto::UNDEFINED && dt != v->type().dtype)
        return fileError(
            file, llvm::formatv("graph output '{0}' is declared with element type "
                                "{1}, but the graph computes {2}",
                                out.name(),
                                dt ? std::string(dtypeName(*dt)) : std::to_string(tt.elem_type()),
                                v->type().str())
                      .str());
      continue;
    }
    // Symbolic dims (the batch among them) are not checked; static dims
    // are, and a declared shape with no dims is a scalar.
    auto declared = valueInfoType(out, file, std::nullopt, false);
    if (!declared)
      return declared.takeError();
    const TensorType& have = v->type();
    bool ok = declared->dtype == have.dtype && declared->rank() == have.rank();
    for (size_t d = 0; ok && d < declared->shape.size(); ++d)
      ok = declared->shape[d] < 0 || declared->shape[d] == have.shape[d];
    if (!ok)
      return fileError(file, "graph output '" + out.name() + "' is declared as " + declared->str() +
                                 ", but the graph computes " + have.str());
  }

  if (llvm::Error e = verifyGraph(*module.graph))
    return fileError(file, "internal error: the imported graph does not verify: " +
                               llvm::toString(std::move(e)));
  return module;
}

llvm::Expected<Module> importFile(const std::string& path, const ImportOptions& opts) {
  onnx::ModelProto model;
  if (llvm::Error e = loadModelProto(path, model))
    return e;
  return importModel(model, path, opts);
}

} // namespace lwcc
