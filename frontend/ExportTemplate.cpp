//===- ExportTemplate.cpp - The input model, ready for trained weights ----===//
//
// See ExportTemplate.h for the steps. The payload offsets come from walking
// the serialized bytes, not from predicting protobuf's layout: what the walk
// finds is what the file holds.
//
//===----------------------------------------------------------------------===//
#include "frontend/ExportTemplate.h"

#include "frontend/Frontend.h"
#include "onnx/onnx_pb.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

namespace lwcc {

namespace fs = std::filesystem;

namespace {

llvm::Error fileError(const std::string& file, const std::string& msg) {
  return makeError(Location{file, 0, 0, ""}, msg);
}

/// The element count of `t`, or nullopt for a negative dim or an overflow.
std::optional<int64_t> elementCount(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d != 0 && n > INT64_MAX / d))
      return std::nullopt;
    n *= d;
  }
  return n;
}

//===--- The protobuf wire format -------------------------------------===//

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

/// Bounds-checked reads of protobuf fields from bytes[pos, end).
class WireReader {
public:
  WireReader(const std::string& bytes, size_t begin, size_t end)
      : bytes_(bytes), pos_(begin), end_(end) {}

  bool atEnd() const { return pos_ >= end_; }
  size_t pos() const { return pos_; }

  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= end_)
        return false;
      auto b = static_cast<unsigned char>(bytes_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return true;
    }
    return false; // more than 10 bytes
  }

  bool tag(uint32_t& field, uint32_t& wire) {
    uint64_t t = 0;
    if (!varint(t) || (t >> 3) == 0 || (t >> 3) > UINT32_MAX)
      return false;
    field = static_cast<uint32_t>(t >> 3);
    wire = static_cast<uint32_t>(t & 7);
    return true;
  }

  /// The payload [begin, end) of a length-delimited field; moves past it.
  bool payload(size_t& begin, size_t& end) {
    uint64_t len = 0;
    if (!varint(len) || len > end_ - pos_)
      return false;
    begin = pos_;
    end = pos_ + static_cast<size_t>(len);
    pos_ = end;
    return true;
  }

  /// Moves past the value of a field of wire type `wire` whose tag was just
  /// read (a group up to its matching end tag).
  bool skip(uint32_t field, uint32_t wire, int depth = 0) {
    uint64_t v = 0;
    size_t b = 0, e = 0;
    switch (wire) {
    case kVarint:
      return varint(v);
    case kFixed64:
      return advance(8);
    case kFixed32:
      return advance(4);
    case kLengthDelimited:
      return payload(b, e);
    case kStartGroup:
      if (depth > 64)
        return false;
      while (true) {
        uint32_t f = 0, w = 0;
        if (!tag(f, w))
          return false;
        if (w == kEndGroup)
          return f == field;
        if (!skip(f, w, depth + 1))
          return false;
      }
    default: // an end tag without a group, or wire types 6 and 7
      return false;
    }
  }

private:
  bool advance(size_t n) {
    if (n > end_ - pos_)
      return false;
    pos_ += n;
    return true;
  }

  const std::string& bytes_;
  size_t pos_;
  size_t end_;
};

/// A graph initializer as serialized: its name and its raw_data payload.
struct SerializedInitializer {
  std::string name;
  bool hasRaw = false;
  size_t rawBegin = 0, rawEnd = 0;
};

constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kTensorName = 8;
constexpr uint32_t kTensorRawData = 9;

/// The graph's initializers in `bytes` (a serialized ModelProto), in file
/// order; an error string when the bytes do not parse.
std::string walkInitializers(const std::string& bytes, std::vector<SerializedInitializer>& out) {
  WireReader model(bytes, 0, bytes.size());
  bool sawGraph = false;
  while (!model.atEnd()) {
    uint32_t field = 0, wire = 0;
    if (!model.tag(field, wire))
      return llvm::formatv("bad tag in ModelProto at byte {0}", model.pos()).str();
    if (field != kModelGraph || wire != kLengthDelimited) {
      if (!model.skip(field, wire))
        return llvm::formatv("bad field {0} in ModelProto at byte {1}", field, model.pos()).str();
      continue;
    }
    if (sawGraph)
      return "ModelProto holds two graph fields";
    sawGraph = true;
    size_t gb = 0, ge = 0;
    if (!model.payload(gb, ge))
      return "the graph field overruns the ModelProto";
    WireReader graph(bytes, gb, ge);
    while (!graph.atEnd()) {
      if (!graph.tag(field, wire))
        return llvm::formatv("bad tag in GraphProto at byte {0}", graph.pos()).str();
      if (field != kGraphInitializer || wire != kLengthDelimited) {
        if (!graph.skip(field, wire))
          return llvm::formatv("bad field {0} in GraphProto at byte {1}", field, graph.pos()).str();
        continue;
      }
      size_t tb = 0, te = 0;
      if (!graph.payload(tb, te))
        return "an initializer overruns the GraphProto";
      SerializedInitializer init;
      WireReader tensor(bytes, tb, te);
      while (!tensor.atEnd()) {
        if (!tensor.tag(field, wire))
          return llvm::formatv("bad tag in TensorProto at byte {0}", tensor.pos()).str();
        size_t b = 0, e = 0;
        if (wire == kLengthDelimited && (field == kTensorName || field == kTensorRawData)) {
          if (!tensor.payload(b, e))
            return "a field overruns its TensorProto";
          if (field == kTensorName) {
            init.name = bytes.substr(b, e - b);
          } else {
            init.hasRaw = true;
            init.rawBegin = b;
            init.rawEnd = e;
          }
        } else if (!tensor.skip(field, wire)) {
          return llvm::formatv("bad field {0} in TensorProto at byte {1}", field, tensor.pos())
              .str();
        }
      }
      out.push_back(std::move(init));
    }
  }
  if (!sawGraph)
    return "ModelProto has no graph";
  return "";
}

} // namespace

namespace {

/// Rewrites `graph` as the importer reads it: split initializers as
/// initializers of their own (SharedInitializers.h).
llvm::Error splitSharedInitializers(onnx::GraphProto& graph, const TiedChoice& tied) {
  auto planned = planInitializerSplit(graph, tied);
  if (!planned)
    return planned.takeError();
  InitializerSplit& split = *planned;
  if (split.empty())
    return llvm::Error::success();
  RewrittenNodes rewritten = applyInitializerSplit(graph, split);
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (const onnx::NodeProto* node : rewritten.nodes)
    *nodes.Add() = *node;
  graph.mutable_node()->Swap(&nodes);

  std::map<std::string, std::vector<const InitializerSplit::Copy*>> copiesOf;
  for (const InitializerSplit::Copy& c : split.copies)
    copiesOf[c.source].push_back(&c);
  // Each entry of `list` stays unless it is an unread source; a source's
  // copies follow it.
  auto place = [&](auto& list) {
    std::remove_reference_t<decltype(list)> out;
    for (auto& entry : list) {
      auto copies = copiesOf.find(entry.name());
      auto* kept = &entry;
      if (!rewritten.unreadSources.count(entry.name())) {
        kept = out.Add();
        kept->Swap(&entry);
      }
      if (copies != copiesOf.end())
        for (const InitializerSplit::Copy* c : copies->second) {
          auto* copy = out.Add();
          *copy = *kept;
          copy->set_name(c->name);
        }
    }
    list.Swap(&out);
  };
  place(*graph.mutable_initializer());
  // Old exporters list initializers among the inputs: list the copies too.
  place(*graph.mutable_input());
  return llvm::Error::success();
}

} // namespace

llvm::Expected<ExportTemplate> buildExportTemplate(const std::string& modelPath,
                                                   const std::vector<ExportParamSpec>& params,
                                                   const TiedChoice& tied) {
  const std::string& file = modelPath;
  onnx::ModelProto model;
  if (llvm::Error e = loadModelProto(modelPath, model))
    return e;
  if (!model.has_graph())
    return fileError(file, "the model has no graph (not an ONNX model?)");
  onnx::GraphProto& graph = *model.mutable_graph();
  if (graph.sparse_initializer_size())
    return fileError(file, "sparse initializers are not supported");
  std::string dir = fs::path(modelPath).parent_path().string();

  std::map<std::string, int> initIndex;
  for (int k = 0; k < graph.initializer_size(); ++k) {
    const std::string& name = graph.initializer(k).name();
    if (name.empty())
      return fileError(file, "an initializer has no name");
    if (!initIndex.emplace(name, k).second)
      return fileError(file, "initializer '" + name + "' is defined twice");
  }
  if (llvm::Error e = splitSharedInitializers(graph, tied))
    return makeError(Location{file, 0, 0, ""}, llvm::toString(std::move(e)));
  initIndex.clear();
  for (int k = 0; k < graph.initializer_size(); ++k)
    initIndex.emplace(graph.initializer(k).name(), k);

  // Trained initializers: raw_data of the right size, zeros for now.
  std::map<std::string, uint32_t> paramOf;
  std::vector<uint64_t> paramBytes(params.size());
  if (params.size() > UINT32_MAX)
    return fileError(file, "too many params to export");
  for (size_t p = 0; p < params.size(); ++p) {
    const ExportParamSpec& spec = params[p];
    std::string what = "param '" + spec.name + "'";
    auto it = initIndex.find(spec.name);
    if (it == initIndex.end())
      return fileError(file, what + " is not an initializer of the model's graph; it cannot be "
                                    "exported");
    if (!paramOf.emplace(spec.name, static_cast<uint32_t>(p)).second)
      return fileError(file, what + " is listed twice for export");
    onnx::TensorProto& t = *graph.mutable_initializer(it->second);
    std::optional<DType> dt = dtypeFromOnnx(t.data_type());
    if (!dt || *dt != spec.dtype)
      return fileError(file, llvm::formatv("{0} is {1} in the trainer, but its initializer has "
                                           "ONNX element type {2}{3}",
                                           what, dtypeName(spec.dtype), t.data_type(),
                                           dt ? " (" + std::string(dtypeName(*dt)) + ")" : "")
                                 .str());
    std::optional<int64_t> n = elementCount(t);
    if (!n || *n != spec.numel)
      return fileError(file, llvm::formatv("{0} has {1} elements in the trainer, but its "
                                           "initializer has {2}",
                                           what, spec.numel,
                                           n ? std::to_string(*n) : std::string("an invalid shape"))
                                 .str());
    int64_t elemBytes = dtypeSize(spec.dtype);
    if (spec.numel > INT_MAX / elemBytes)
      return fileError(file, what + " is larger than the 2 GiB that one ONNX file can hold");
    paramBytes[p] = static_cast<uint64_t>(spec.numel * elemBytes);
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_string_data();
    t.clear_int64_data();
    t.clear_double_data();
    t.clear_uint64_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(std::string(paramBytes[p], '\0'));
  }

  // Other initializers stored externally: inline them, byte for byte.
  for (onnx::TensorProto& t : *graph.mutable_initializer()) {
    if (paramOf.count(t.name()) || t.data_location() != onnx::TensorProto::EXTERNAL)
      continue;
    std::string what = "initializer '" + t.name() + "'";
    auto data = readExternalData(t, dir, what);
    if (!data)
      return fileError(file, llvm::toString(data.takeError()));
    std::optional<DType> dt = dtypeFromOnnx(t.data_type());
    std::optional<int64_t> n = elementCount(t);
    uint64_t size = data->size(), elem = dt ? static_cast<uint64_t>(dtypeSize(*dt)) : 1;
    if (dt && n && (size % elem != 0 || size / elem != static_cast<uint64_t>(*n)))
      return fileError(file, llvm::formatv("{0}: external data has {1} bytes, which is not {2} "
                                           "elements of {3} ({4} bytes each)",
                                           what, size, *n, dtypeName(*dt), elem)
                                 .str());
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(std::move(*data));
  }

  // Where the export comes from.
  std::string origin = fs::path(modelPath).filename().string();
  onnx::StringStringEntryProto* entry = nullptr;
  for (auto& kv : *model.mutable_metadata_props())
    if (kv.key() == kExportedFromKey)
      entry = &kv;
  if (!entry) {
    entry = model.add_metadata_props();
    entry->set_key(kExportedFromKey);
  }
  entry->set_value(origin);

  size_t total = model.ByteSizeLong();
  if (total > static_cast<size_t>(INT_MAX))
    return fileError(file, llvm::formatv("the exported model would take {0} bytes, more than the "
                                         "2 GiB that one ONNX file can hold",
                                         total)
                               .str());
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return fileError(file, "cannot serialize the model for export");

  std::vector<SerializedInitializer> found;
  if (std::string bad = walkInitializers(bytes, found); !bad.empty())
    return fileError(file, "internal error: the serialized model does not read back: " + bad);

  // Cuts in file order; then the bytes without the payloads.
  struct Cut {
    size_t begin, end;
    uint32_t param;
  };
  std::vector<Cut> cuts;
  std::vector<bool> placed(params.size(), false);
  for (const SerializedInitializer& init : found) {
    auto it = paramOf.find(init.name);
    if (it == paramOf.end())
      continue;
    uint32_t p = it->second;
    if (placed[p] || !init.hasRaw || init.rawEnd - init.rawBegin != paramBytes[p])
      return fileError(file, "internal error: the raw data of param '" + init.name +
                                 "' is not where the export expects it");
    placed[p] = true;
    if (paramBytes[p] > 0)
      cuts.push_back({init.rawBegin, init.rawEnd, p});
  }
  for (size_t p = 0; p < params.size(); ++p)
    if (!placed[p])
      return fileError(file,
                       "internal error: the serialized model lacks param '" + params[p].name + "'");

  ExportTemplate out;
  size_t cutBytes = 0;
  for (const Cut& c : cuts)
    cutBytes += c.end - c.begin;
  out.bytes.reserve(bytes.size() - cutBytes);
  size_t from = 0;
  for (const Cut& c : cuts) {
    out.bytes.append(bytes, from, c.begin - from);
    out.cuts.push_back({out.bytes.size(), c.param, c.end - c.begin});
    from = c.end;
  }
  out.bytes.append(bytes, from, std::string::npos);
  return out;
}

} // namespace lwcc
