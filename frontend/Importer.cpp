//===- Importer.cpp - ONNX ModelProto -> Module ---------------------------===//
//
// 1. Read the file (binary protobuf, or ONNX text for .onnxtext).
// 2. Find the default-domain opset and check it is one lwcc supports.
// 3. Split the float initializers that several nodes read into one param
//    per consumer (SharedInitializers.h); warn when the model looks exported
//    with batch norm folded away.
// 4. Bind the graph inputs (fixing symbolic batch dims with --batch), then
//    the initializers: float ones become params (frozen where a value is not
//    finite: a constant such as a mask's -inf), small integer ones become
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
#include "frontend/OnnxText.h"
#include "ir/Verifier.h"
#include "onnx/onnx_pb.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sys/mman.h>
#include <unistd.h>

namespace lwcc {

namespace fs = std::filesystem;

namespace {

/// Integer initializers up to this size become constants (shape data).
constexpr int64_t kMaxIntConstant = 1 << 16;

/// Float initializers up to this size are read at import even where the
/// weights are not (ImportOptions::weights off), to find the non-finite ones.
constexpr int64_t kMaxCheckedUnread = 1 << 16;

/// Whether a float initializer holds an infinity or a NaN: a constant of the
/// model, such as the -inf that an attention mask selects, and no weight. No
/// update can train it (SGD's or AdamW's weight decay alone turns -inf into
/// NaN, and its gradient is zero or undefined), so it becomes a frozen param:
/// kept as written, with no gradient and no update.
bool hasNonFinite(const Tensor& t) {
  return t.isFloatData() &&
         std::any_of(t.f.begin(), t.f.end(), [](double v) { return !std::isfinite(v); });
}

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

namespace {

/// The protobuf wire format, as far as leaving raw data unread needs it.
struct WireReader {
  const uint8_t* p;
  const uint8_t* end;
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p == end)
        return false;
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return true;
    }
    return false;
  }
  /// The next field's number and wire type, and its payload: for a
  /// length-delimited field (wire type 2) [payload, p).
  bool field(uint64_t& number, int& type, const uint8_t*& payload) {
    uint64_t tag = 0, n = 0;
    if (!varint(tag))
      return false;
    number = tag >> 3;
    type = static_cast<int>(tag & 7);
    switch (type) {
    case 0:
      return varint(n);
    case 1:
    case 5:
      n = type == 1 ? 8 : 4;
      break;
    case 2:
      if (!varint(n))
        return false;
      break;
    default: // groups: not in ONNX
      return false;
    }
    if (n > static_cast<uint64_t>(end - p))
      return false;
    payload = p;
    p += n;
    return true;
  }
};

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

/// A length-delimited field `number` holding `bytes`.
void putMessage(std::string& out, uint64_t number, const std::string& bytes) {
  putVarint(out, number << 3 | 2);
  putVarint(out, bytes.size());
  out += bytes;
}

/// Raw data at least this large is left in the file (a shape's few int64s
/// are read as they are).
constexpr uint64_t kUnreadRawBytes = 4096;

/// ONNX's field numbers: ModelProto.graph, GraphProto.initializer,
/// TensorProto.raw_data.
constexpr uint64_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;

/// Copies the fields of the message [b, e) to `out`, but those `rewrite`
/// writes itself: called with each field's number, wire type and payload
/// [payload, end), it returns whether it did, or nothing where it failed.
/// False where the bytes do not parse or `rewrite` failed.
template <class Rewrite>
bool copyFields(const uint8_t* b, const uint8_t* e, std::string& out, Rewrite rewrite) {
  WireReader r{b, e};
  for (uint64_t number; r.p != r.end;) {
    const uint8_t* start = r.p;
    int type;
    const uint8_t* payload = nullptr;
    if (!r.field(number, type, payload))
      return false;
    std::optional<bool> done = rewrite(number, type, payload, r.p);
    if (!done)
      return false;
    if (!*done)
      out.append(reinterpret_cast<const char*>(start), static_cast<size_t>(r.p - start));
  }
  return true;
}

/// The fields of TensorProto [b, e) but a large raw_data, whose range in
/// the file (from `file`) goes to `at`; false where the bytes do not parse.
bool tensorWithoutRaw(const uint8_t* file, const uint8_t* b, const uint8_t* e, std::string& out,
                      std::optional<std::pair<int64_t, int64_t>>& at) {
  // One raw_data (of several, the last is the one that counts: kept).
  int raws = 0;
  std::string ignored;
  if (!copyFields(b, e, ignored, [&](uint64_t number, int, const uint8_t*, const uint8_t*) {
        raws += number == kTensorRawData;
        return std::optional<bool>(true);
      }))
    return false;
  return copyFields(b, e, out,
                    [&](uint64_t number, int type, const uint8_t* payload, const uint8_t* end) {
                      const bool unread = number == kTensorRawData && type == 2 && raws == 1 &&
                                          static_cast<uint64_t>(end - payload) >= kUnreadRawBytes;
                      if (unread)
                        at = std::make_pair(static_cast<int64_t>(payload - file),
                                            static_cast<int64_t>(end - payload));
                      return std::optional<bool>(unread);
                    });
}

/// The fields of GraphProto [b, e), each initializer's without its large
/// raw data (in order: where each lies, or none).
bool graphWithoutRaw(const uint8_t* file, const uint8_t* b, const uint8_t* e, std::string& out,
                     std::vector<std::optional<std::pair<int64_t, int64_t>>>& at) {
  return copyFields(b, e, out,
                    [&](uint64_t number, int type, const uint8_t* payload,
                        const uint8_t* end) -> std::optional<bool> {
                      if (number != kGraphInitializer || type != 2)
                        return false;
                      std::string tensor;
                      std::optional<std::pair<int64_t, int64_t>> raw;
                      if (!tensorWithoutRaw(file, payload, end, tensor, raw))
                        return std::nullopt;
                      at.push_back(raw);
                      if (raw)
                        putMessage(out, number, tensor);
                      return raw.has_value();
                    });
}

/// The ModelProto in `file`, its graph's initializers without their large
/// raw data; false where the bytes do not parse (the caller reads them as
/// protobuf does, to say why).
bool parseWithoutRaw(const uint8_t* file, size_t size, onnx::ModelProto& model,
                     std::vector<std::optional<std::pair<int64_t, int64_t>>>& at) {
  std::string out;
  if (!copyFields(file, file + size, out,
                  [&](uint64_t number, int type, const uint8_t* payload,
                      const uint8_t* end) -> std::optional<bool> {
                    if (number != kModelGraph || type != 2)
                      return false;
                    std::string graph;
                    if (!graphWithoutRaw(file, payload, end, graph, at))
                      return std::nullopt;
                    putMessage(out, number, graph);
                    return true;
                  }))
    return false;
  return model.ParseFromString(out) &&
         static_cast<size_t>(model.graph().initializer_size()) == at.size();
}

} // namespace

llvm::Error loadModelProto(const std::string& path, onnx::ModelProto& model,
                           UnreadRawData* unread) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return fileError(path, fs::exists(path, ec) ? "not a regular file" : "no such file");
  if (llvm::StringRef(path).endswith(".onnxtext")) {
    auto file = llvm::MemoryBuffer::getFile(path);
    if (!file)
      return fileError(path, "cannot read: " + file.getError().message());
    return parseOnnxText((*file)->getBuffer(), path, model);
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec)
    return fileError(path, "cannot read: " + ec.message());
  if (size == 0)
    return fileError(path, "empty file; expected an ONNX model");
  if (size > static_cast<uintmax_t>(std::numeric_limits<int>::max()))
    return fileError(path, "larger than 2 GiB, a protobuf's limit (a model this large keeps "
                           "its weights in external data files)");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fileError(path, std::string("cannot read: ") + std::strerror(errno));
  // Without the weights' values: the file mapped, the pages of their raw
  // data never touched.
  if (unread) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      std::vector<std::optional<std::pair<int64_t, int64_t>>> at;
      const bool parsed = parseWithoutRaw(static_cast<const uint8_t*>(map), size, model, at);
      ::munmap(map, size);
      if (parsed) {
        ::close(fd);
        unread->file = path;
        unread->at.clear();
        for (size_t k = 0; k < at.size(); ++k)
          if (at[k])
            unread->at.emplace(&model.graph().initializer(static_cast<int>(k)), *at[k]);
        return llvm::Error::success();
      }
      model.Clear();
    }
  }
  // Parsed as it is read, in blocks: a large model's file is mostly its
  // weights, held once (in the parsed tensors), not twice.
  const bool parsed = model.ParseFromFileDescriptor(fd);
  ::close(fd);
  if (!parsed)
    return fileError(path, "not a valid ONNX model (the protobuf does not parse: truncated or "
                           "not ONNX)");
  return llvm::Error::success();
}

namespace {

/// `t` with its raw data, read from where loadModelProto left it.
llvm::Expected<onnx::TensorProto> withRawData(const onnx::TensorProto& t, const std::string& file,
                                              std::pair<int64_t, int64_t> at,
                                              const std::string& what) {
  onnx::TensorProto whole = t;
  std::string* raw = whole.mutable_raw_data();
  raw->resize(static_cast<size_t>(at.second));
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  int64_t got = 0;
  while (fd >= 0 && got < at.second) {
    const ssize_t n = ::pread(fd, raw->data() + got, static_cast<size_t>(at.second - got),
                              static_cast<off_t>(at.first + got));
    if (n <= 0)
      break;
    got += n;
  }
  if (fd >= 0)
    ::close(fd);
  if (got != at.second)
    return makeError(what + ": cannot read its raw data from '" + file + "' (changed since?)");
  return whole;
}

} // namespace

llvm::Expected<Module> importModel(const onnx::ModelProto& model, const std::string& path,
                                   const ImportOptions& opts, const UnreadRawData* unread) {
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
  auto planned = planInitializerSplit(graph, opts.tied);
  if (!planned)
    return makeError(Location{file, 0, 0, ""}, llvm::toString(planned.takeError()));
  const InitializerSplit& split = *planned;
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
  const std::map<std::string, ExportedValue> exported = exportedValues(graph);
  auto addParam = [&](const std::string& name, const TensorType& type, bool nonFinite) {
    Value* p = module.graph->addParam(name, name, type);
    // A non-persistent buffer, a constant that is not finite, or a dynamo
    // export's constant keeps its value: no gradient, no update.
    // A shared initializer's copies are what it is (SharedInitializers.h).
    std::string source = name;
    for (const InitializerSplit::Copy& c : split.copies)
      if (c.name == name)
        source = c.source;
    auto it = exported.find(source);
    const bool constant = exportConstant(source, exported);
    if ((it != exported.end() && it->second.kind == "BUFFER" && it->second.transient) ||
        nonFinite || constant)
      p->setFrozen(true);
    // A table the exporter's optimizer computed from a PyTorch param among
    // other values (a position embedding's rows): PyTorch trains the param.
    if (constant && it != exported.end()) {
      std::string params;
      for (const std::string& from : it->second.foldedFrom)
        if (llvm::StringRef(from).endswith(".weight") || llvm::StringRef(from).endswith(".bias"))
          params += (params.empty() ? "" : ", ") + from;
      if (!params.empty() && opts.diag)
        opts.diag(Severity::Warning, Location{file, 0, 0, ""},
                  "initializer '" + name + "' is what the exporter's optimizer computed from " +
                      params + " and other values: lwcc keeps it as written, where PyTorch " +
                      "trains " + params + " (export with optimize=False to train it)");
    }
    ctx.bind(name, p);
  };
  for (const auto& [name, proto] : initializers) {
    const std::string what = "initializer '" + name + "'";
    // Its raw data left in the file by loadModelProto, if it was.
    std::optional<std::pair<int64_t, int64_t>> rawAt;
    if (unread)
      if (auto it = unread->at.find(proto); it != unread->at.end())
        rawAt = it->second;
    auto read = [&, proto = proto, rawAt, what]() -> llvm::Expected<Tensor> {
      if (!rawAt)
        return tensorFromProto(*proto, dir, what);
      auto whole = withRawData(*proto, unread->file, *rawAt, what);
      if (!whole)
        return whole.takeError();
      return tensorFromProto(*whole, dir, what);
    };
    // A dynamo export's scalar constant (an attention scale, GELU's
    // coefficients, a mask's fill): a constant of the graph, which passes
    // can read (the attention pattern folds its scale).
    if (std::optional<DType> dt = dtypeFromOnnx(proto->data_type());
        dt && isFloat(*dt) && proto->dims_size() == 0 && exportConstant(name, exported)) {
      auto t = read();
      if (!t)
        return makeError(Location{file, 0, 0, ""}, llvm::toString(t.takeError()));
      defined.insert(name);
      Value* c = ctx.constant(*t);
      c->setName(name);
      ctx.bind(name, c);
      continue;
    }
    // Float values not asked for: checked, not read.
    if (std::optional<DType> dt = dtypeFromOnnx(proto->data_type());
        !opts.weights && dt && isFloat(*dt)) {
      auto type = tensorTypeFromProto(*proto, dir, what,
                                      rawAt ? std::optional<int64_t>(rawAt->second) : std::nullopt);
      if (!type)
        return makeError(Location{file, 0, 0, ""}, llvm::toString(type.takeError()));
      // A small one is read all the same, to freeze it where not finite.
      bool nonFinite = false;
      if (type->numElements() <= kMaxCheckedUnread) {
        auto t = read();
        if (!t)
          return makeError(Location{file, 0, 0, ""}, llvm::toString(t.takeError()));
        nonFinite = hasNonFinite(*t);
      }
      defined.insert(name);
      addParam(name, *type, nonFinite);
      ctx.deferValues(name, read);
      continue;
    }
    auto t = read();
    if (!t)
      return makeError(Location{file, 0, 0, ""}, llvm::toString(t.takeError()));
    defined.insert(name);
    if (!t->isFloatData() && t->size() <= kMaxIntConstant) {
      Value* c = ctx.constant(*t);
      c->setName(name);
      ctx.bind(name, c);
    } else {
      addParam(name, t->type, hasNonFinite(*t));
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
  // Without the weights' values, their bytes are left in the file.
  UnreadRawData unread;
  if (llvm::Error e = loadModelProto(path, model, opts.weights ? nullptr : &unread))
    return e;
  return importModel(model, path, opts, opts.weights ? nullptr : &unread);
}

} // namespace lwcc
