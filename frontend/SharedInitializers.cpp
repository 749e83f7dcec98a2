//===- SharedInitializers.cpp - Initializers several nodes read -----------===//
//
// See SharedInitializers.h for the plan's steps.
//
//===----------------------------------------------------------------------===//
#include "frontend/SharedInitializers.h"

#include "frontend/Frontend.h"
#include "onnx/onnx_pb.h"

#include <algorithm>
#include <google/protobuf/unknown_field_set.h>
#include <optional>

namespace lwcc {

namespace {

bool isDefaultDomain(const onnx::NodeProto& node) {
  return node.domain().empty() || node.domain() == "ai.onnx";
}

bool isIdentity(const onnx::NodeProto& node) {
  return isDefaultDomain(node) && node.op_type() == "Identity" && node.input_size() == 1 &&
         node.output_size() == 1 && !node.output(0).empty();
}

/// Inputs 3 and 4 of BatchNormalization: state the op updates in training,
/// never a trainable input.
bool readsRunningStat(const onnx::NodeProto& node, int input) {
  return isDefaultDomain(node) && node.op_type() == "BatchNormalization" &&
         (input == 3 || input == 4);
}

/// Inputs read only for their shape or element type (the dynamo exporter's
/// Shape and CastLike of a weight): not a use of the values, so no param of
/// their own; they keep reading the initializer's own name.
bool readsOnlyMetadata(const onnx::NodeProto& node, int input) {
  if (!isDefaultDomain(node))
    return false;
  const std::string& op = node.op_type();
  return ((op == "Shape" || op == "Size") && input == 0) || (op == "CastLike" && input == 1);
}

/// One node reading a split initializer under one name (for a running
/// statistic: under one name at one input).
struct InitializerUse {
  int node = 0;
  std::string name;
  bool state = false;
  std::vector<int> inputs;
};

} // namespace

namespace {

/// The names in a folded_from list: "['a', 'b.c']" -> a, b.c.
std::vector<std::string> foldedNames(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = text.find('\'', at)) != std::string::npos) {
    size_t end = text.find('\'', at + 1);
    if (end == std::string::npos)
      break;
    out.push_back(text.substr(at + 1, end - at - 1));
    at = end + 1;
  }
  return out;
}

} // namespace

std::map<std::string, ExportedValue> exportedValues(const onnx::GraphProto& graph) {
  constexpr int kValueInfoMetadataProps = 4;
  std::map<std::string, ExportedValue> out;
  auto scan = [&](const onnx::ValueInfoProto& vi) {
    const google::protobuf::UnknownFieldSet& fields = vi.unknown_fields();
    ExportedValue v;
    bool any = false;
    for (int i = 0; i < fields.field_count(); ++i) {
      const google::protobuf::UnknownField& f = fields.field(i);
      if (f.number() != kValueInfoMetadataProps ||
          f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
        continue;
      onnx::StringStringEntryProto entry;
      if (!entry.ParseFromString(f.length_delimited()))
        continue;
      if (entry.key() == "pkg.torch.export.graph_signature.InputSpec.kind")
        v.kind = entry.value(), any = true;
      else if (entry.key() == "pkg.torch.export.graph_signature.InputSpec.persistent")
        v.transient = entry.value() == "False";
      else if (entry.key() == "pkg.onnxscript.optimizer.folded_from")
        v.foldedFrom = foldedNames(entry.value()), any = true;
    }
    if (any)
      out.emplace(vi.name(), std::move(v));
  };
  for (const auto& vi : graph.input())
    scan(vi);
  for (const auto& vi : graph.value_info())
    scan(vi);
  return out;
}

bool exportConstant(const std::string& name, const std::map<std::string, ExportedValue>& exported) {
  if (std::none_of(exported.begin(), exported.end(),
                   [](const auto& kv) { return !kv.second.kind.empty(); }))
    return false; // no dynamo signature: every float initializer is a weight
  auto it = exported.find(name);
  if (it == exported.end())
    return true;
  if (!it->second.kind.empty())
    return false; // PARAMETER; BUFFER as before (running statistics)
  return it->second.foldedFrom.size() != 1;
}

llvm::Expected<TiedChoice> parseTiedChoice(const std::string& spec) {
  TiedChoice choice;
  bool fileChoice = false;
  auto modeOf = [](const std::string& s) -> std::optional<TiedInitializers> {
    if (s == "auto")
      return TiedInitializers::Auto;
    if (s == "untie")
      return TiedInitializers::Untie;
    if (s == "keep")
      return TiedInitializers::Keep;
    return std::nullopt;
  };
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = std::min(spec.find(',', start), spec.size());
    std::string entry = spec.substr(start, end - start);
    start = end + 1;
    size_t colon = entry.find(':');
    std::optional<TiedInitializers> m = modeOf(entry.substr(0, colon));
    if (colon == std::string::npos) {
      if (!m)
        return makeError("--tied-initializers: '" + entry +
                         "' is not auto, untie, keep, keep:NAME or untie:NAME");
      if (fileChoice)
        return makeError("--tied-initializers: '" + entry +
                         "' is a second choice for the whole file");
      fileChoice = true;
      choice.mode = *m;
      continue;
    }
    std::string name = entry.substr(colon + 1);
    if (!m || *m == TiedInitializers::Auto || name.empty())
      return makeError("--tied-initializers: '" + entry +
                       "' is not keep:NAME or untie:NAME (an initializer's name)");
    if (!choice.byName.emplace(name, *m).second)
      return makeError("--tied-initializers: initializer '" + name + "' is named twice");
  }
  return choice;
}

llvm::Expected<InitializerSplit> planInitializerSplit(const onnx::GraphProto& graph,
                                                      const TiedChoice& choice) {
  InitializerSplit plan;
  // Float initializers of rank >= 1: the params a network trains. Scalars
  // are exporters' constants and stay shared.
  std::set<std::string> candidates, taken;
  std::map<std::string, int> rank;
  const std::map<std::string, ExportedValue> exported = exportedValues(graph);
  for (const auto& init : graph.initializer()) {
    taken.insert(init.name());
    std::optional<DType> dt = dtypeFromOnnx(init.data_type());
    // A dynamo export's constant (a rotary table, a mask) is no param:
    // several nodes read it as written.
    if (dt && isFloat(*dt) && init.dims_size() > 0 && !exportConstant(init.name(), exported)) {
      candidates.insert(init.name());
      rank[init.name()] = init.dims_size();
    }
  }
  std::set<std::string> graphOutputs;
  for (const auto& out : graph.output())
    graphOutputs.insert(out.name());
  for (const auto& in : graph.input())
    taken.insert(in.name());
  for (const auto& node : graph.node())
    taken.insert(node.output().begin(), node.output().end());

  // 1. Alias names, to a fixpoint (exporters need not order the nodes).
  std::map<std::string, std::string> root, parent;
  std::map<std::string, int> aliasNode;
  for (const std::string& c : candidates)
    root[c] = c;
  for (bool changed = true; changed;) {
    changed = false;
    for (int k = 0; k < graph.node_size(); ++k) {
      const onnx::NodeProto& node = graph.node(k);
      if (!isIdentity(node) || root.count(node.output(0)) || graphOutputs.count(node.output(0)))
        continue;
      auto it = root.find(node.input(0));
      if (it == root.end())
        continue;
      root[node.output(0)] = it->second;
      parent[node.output(0)] = node.input(0);
      aliasNode[node.output(0)] = k;
      changed = true;
    }
  }
  std::set<int> aliasNodes;
  for (const auto& [name, k] : aliasNode)
    aliasNodes.insert(k);

  // 2. Uses, in node order.
  std::map<std::string, std::vector<InitializerUse>> uses;
  for (int k = 0; k < graph.node_size(); ++k) {
    if (aliasNodes.count(k))
      continue;
    const onnx::NodeProto& node = graph.node(k);
    for (int i = 0; i < node.input_size(); ++i) {
      auto it = root.find(node.input(i));
      if (it == root.end() || readsOnlyMetadata(node, i))
        continue;
      bool state = readsRunningStat(node, i);
      std::vector<InitializerUse>& list = uses[it->second];
      auto same = std::find_if(list.begin(), list.end(), [&](const InitializerUse& u) {
        return u.node == k && u.name == node.input(i) && !u.state && !state;
      });
      if (same != list.end())
        same->inputs.push_back(i);
      else
        list.push_back({k, node.input(i), state, {i}});
    }
  }

  // A choice by name is for an initializer several nodes read as a weight.
  for (const auto& [name, m] : choice.byName) {
    auto it = uses.find(name);
    if (it == uses.end() || std::count_if(it->second.begin(), it->second.end(),
                                          [](const InitializerUse& u) { return !u.state; }) < 2)
      return makeError("--tied-initializers names '" + name +
                       "', which is no float initializer that several nodes read as a weight");
  }

  for (const auto& [x, list] : uses) {
    // With Auto: tied where the uses say so (see SharedInitializers.h).
    TiedInitializers mode = choice.of(x);
    bool keep = mode == TiedInitializers::Keep;
    if (mode == TiedInitializers::Auto) {
      std::vector<const InitializerUse*> trained;
      for (const InitializerUse& u : list)
        if (!u.state)
          trained.push_back(&u);
      auto isTable = [&](const InitializerUse* u) {
        const onnx::NodeProto& node = graph.node(u->node);
        return isDefaultDomain(node) && node.op_type() == "Gather" && u->inputs == std::vector{0};
      };
      auto isWeight = [&](const InitializerUse* u) {
        const onnx::NodeProto& node = graph.node(u->node);
        return isDefaultDomain(node) && (node.op_type() == "Transpose" ||
                                         node.op_type() == "MatMul" || node.op_type() == "Gemm");
      };
      if (trained.size() > 1) {
        if (std::any_of(trained.begin(), trained.end(), isTable) &&
            std::any_of(trained.begin(), trained.end(), isWeight) &&
            std::all_of(trained.begin(), trained.end(),
                        [&](const InitializerUse* u) { return isTable(u) || isWeight(u); })) {
          keep = true;
        } else if (rank.at(x) >= 2) {
          std::string readers;
          for (const InitializerUse* u : trained) {
            const onnx::NodeProto& node = graph.node(u->node);
            readers += (readers.empty() ? "" : ", ") + std::string("'") + node.name() + "' (" +
                       node.op_type() + ")";
          }
          return makeError("initializer '" + x + "' is read as a weight by " +
                           std::to_string(trained.size()) + " nodes (" + readers +
                           "): the file does not say whether the model holds one param used " +
                           "that often (--tied-initializers=keep:" + x + ": one param, its " +
                           "gradient summed) or equal params its exporter deduplicated " +
                           "(--tied-initializers=untie:" + x + ": one each; keep or untie " +
                           "alone decides for every initializer of the file)");
        }
      }
    }
    // Groups: one param each. With Keep, the trainable uses form group 0.
    std::vector<std::vector<const InitializerUse*>> groups;
    int trainable = -1;
    for (const InitializerUse& u : list) {
      if (keep && !u.state) {
        if (trainable < 0) {
          trainable = static_cast<int>(groups.size());
          groups.emplace_back();
        }
        groups[trainable].push_back(&u);
      } else {
        groups.push_back({&u});
      }
    }
    if (groups.size() <= 1)
      continue;

    // 3. The primary group keeps X and the alias chains it reads through.
    int primary = trainable;
    for (size_t g = 0; primary < 0 && g < groups.size(); ++g)
      if (groups[g].front()->name == x)
        primary = static_cast<int>(g);
    std::set<std::string> kept;
    if (primary >= 0)
      for (const InitializerUse* u : groups[primary])
        for (std::string n = u->name; n != x; n = parent.at(n))
          kept.insert(n);

    // 4. Every other group becomes a copy.
    std::set<std::string> claimed;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (static_cast<int>(g) == primary)
        continue;
      const InitializerUse& u = *groups[g].front();
      InitializerSplit::Copy copy;
      copy.source = x;
      if (u.name != x && !kept.count(u.name) && !claimed.count(u.name)) {
        copy.name = u.name;
        copy.replacesNodes.push_back(aliasNode.at(u.name));
      } else {
        for (int k = 1; copy.name.empty(); ++k) {
          std::string candidate = u.name + "." + std::to_string(k);
          if (!taken.count(candidate))
            copy.name = candidate;
        }
      }
      claimed.insert(copy.name);
      taken.insert(copy.name);
      for (int i : u.inputs)
        copy.readers.emplace_back(u.node, i);
      plan.copies.push_back(std::move(copy));
    }
    std::vector<int>& nodes = plan.aliasNodes[x];
    for (const auto& [name, k] : aliasNode)
      if (root.at(name) == x)
        nodes.push_back(k);
    std::sort(nodes.begin(), nodes.end());
  }
  return plan;
}

RewrittenNodes applyInitializerSplit(const onnx::GraphProto& graph, const InitializerSplit& split) {
  RewrittenNodes out;
  std::map<int, std::vector<std::pair<int, std::string>>> renames;
  std::set<int> dropped;
  for (const InitializerSplit::Copy& c : split.copies) {
    for (const auto& [node, input] : c.readers)
      if (graph.node(node).input(input) != c.name)
        renames[node].emplace_back(input, c.name);
    dropped.insert(c.replacesNodes.begin(), c.replacesNodes.end());
  }
  std::set<std::string> graphOutputs;
  for (const auto& o : graph.output())
    graphOutputs.insert(o.name());

  // 5. Alias nodes whose outputs no kept node reads, to a fixpoint.
  auto readNames = [&]() {
    std::set<std::string> read = graphOutputs;
    for (int k = 0; k < graph.node_size(); ++k) {
      if (dropped.count(k))
        continue;
      const onnx::NodeProto& node = graph.node(k);
      auto it = renames.find(k);
      for (int i = 0; i < node.input_size(); ++i) {
        std::string name = node.input(i);
        if (it != renames.end())
          for (const auto& [input, to] : it->second)
            if (input == i)
              name = to;
        read.insert(name);
      }
    }
    return read;
  };
  for (bool changed = true; changed;) {
    changed = false;
    std::set<std::string> read = readNames();
    for (const auto& [x, nodes] : split.aliasNodes)
      for (int k : nodes)
        if (!dropped.count(k) && !read.count(graph.node(k).output(0))) {
          dropped.insert(k);
          changed = true;
        }
  }
  std::set<std::string> read = readNames();
  for (const auto& [x, nodes] : split.aliasNodes)
    if (!read.count(x))
      out.unreadSources.insert(x);

  for (int k = 0; k < graph.node_size(); ++k) {
    if (dropped.count(k))
      continue;
    auto it = renames.find(k);
    if (it == renames.end()) {
      out.nodes.push_back(&graph.node(k));
      continue;
    }
    auto node = std::make_unique<onnx::NodeProto>(graph.node(k));
    for (const auto& [input, to] : it->second)
      node->set_input(input, to);
    out.nodes.push_back(node.get());
    out.storage.push_back(std::move(node));
  }
  return out;
}

namespace {

/// Field 9 of NodeProto (metadata_props, ONNX 1.16 and later), which the
/// ONNX headers lwcc builds with do not know: the values of `key` among the
/// node's unknown fields.
std::vector<std::string> nodeMetadata(const onnx::NodeProto& node, const std::string& key) {
  constexpr int kNodeMetadataProps = 9;
  std::vector<std::string> values;
  const google::protobuf::UnknownFieldSet& fields = node.unknown_fields();
  for (int f = 0; f < fields.field_count(); ++f) {
    const google::protobuf::UnknownField& field = fields.field(f);
    if (field.number() != kNodeMetadataProps ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(field.length_delimited()) && entry.key() == key)
      values.push_back(entry.value());
  }
  return values;
}

} // namespace

std::string exportedTrainingWarning(const onnx::ModelProto& model) {
  if (model.producer_name() != "pytorch" || !model.has_graph())
    return "";
  const onnx::GraphProto& graph = model.graph();
  // Some batch norms may stay (one that follows no convolution is not
  // folded); the folded ones are the convolutions that say so.
  std::set<std::string> initializers;
  for (const auto& init : graph.initializer())
    initializers.insert(init.name());
  std::string first, firstBias;
  int folded = 0, biasless = 0;
  bool dynamo = false;
  for (const auto& node : graph.node()) {
    if (node.op_type() != "Conv")
      continue;
    std::string why;
    // The dynamo exporter's optimizer names the rewrite rules it applied.
    for (const std::string& rules : nodeMetadata(node, "pkg.onnxscript.rewriter.rule_name")) {
      if (rules.find("FuseBatchNorm") != std::string::npos) {
        why = "holds a BatchNormalization that the exporter's optimizer folded into it (" + rules +
              ")";
        dynamo = true;
      } else if (rules.find("RemoveOptionalBiasFromConv") != std::string::npos && biasless++ == 0) {
        firstBias = node.name();
      }
    }
    // The TorchScript exporter names the tensors its constant folding made
    // after the op that reads them ("onnx::Conv_193"); a network's own
    // params keep their module names ("features.0.weight").
    for (int i = 1; why.empty() && i < node.input_size() && i < 3; ++i)
      if (initializers.count(node.input(i)) && node.input(i).rfind("onnx::", 0) == 0)
        why = "reads '" + node.input(i) +
              "', a tensor the exporter made by folding a BatchNormalization into the "
              "convolution (an eval-mode export)";
    if (why.empty())
      continue;
    if (folded++ == 0)
      first = "node '" + node.name() + "' (Conv) " + why;
  }
  if (!folded && biasless)
    return "node '" + firstBias + "' (Conv)" +
           (biasless > 1 ? " and " + std::to_string(biasless - 1) + " other Conv nodes lost their"
                         : " lost its") +
           " bias: the exporter's optimizer removed it (all zeros, as initialized), so lwcc "
           "cannot train it. To keep it, export with torch.onnx.export(..., dynamo=True, "
           "optimize=False)";
  if (!folded)
    return "";
  std::string others =
      folded > 1 ? " (and " + std::to_string(folded - 1) + " other Conv nodes likewise)" : "";
  return first + others +
         ": PyTorch's exporter folded batch norm into the convolutions, so lwcc trains the "
         "network without those batch norms. To keep them, export with " +
         (dynamo ? "torch.onnx.export(..., dynamo=True, optimize=False), or with dynamo=False, "
                   "training=torch.onnx.TrainingMode.PRESERVE and do_constant_folding=False"
                 : "torch.onnx.export(..., training=torch.onnx.TrainingMode.PRESERVE, "
                   "do_constant_folding=False)");
}

} // namespace lwcc
