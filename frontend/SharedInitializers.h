//===- SharedInitializers.h - Initializers several nodes read --*- C++ -*-===//
//
// PyTorch's TorchScript exporter deduplicates initializers with equal values:
// every BatchNormalization bias and running mean of a fresh network starts at
// zero, so they become one initializer that the other layers read through
// Identity nodes ("layer1.0.bn1.bias = Identity(bn1.bias)"). The network the
// user exported has one tensor per layer. The importer therefore splits such
// an initializer into one param per consumer, and the export template writes
// the trained model back with one initializer per param, under the names the
// nodes read.
//
// A use of a float initializer X of rank >= 1 (scalars are exporters'
// constants and stay shared) is one node reading it, directly or through
// a chain of Identity nodes, under one name; a BatchNormalization reading it
// as running mean or variance (inputs 3 and 4) is a use of its own for that
// input. With TiedInitializers::Untie every use becomes its own param; with
// Keep the trainable uses share one param (whose gradient is then the sum)
// and only the running statistics get their own.
//
// The plan:
//  1. Alias names: the outputs of Identity nodes whose input is X or an alias
//     of X (not graph outputs).
//  2. Uses of X by the other nodes, in node order, and their groups (one param
//     each). Nothing to do when there is at most one group.
//  3. The primary group keeps X: the first group with a use that reads X
//     directly (with Keep, the trainable group). Alias names on the chains to
//     the primary group's uses stay Identity outputs.
//  4. Every other group becomes a copy of X: named after the name it reads
//     when that is an alias no one else has claimed (its Identity node is
//     dropped), else "NAME.k" with the node inputs renamed to it.
//  5. Identity nodes whose outputs no one reads any more are dropped, and X
//     itself when no node reads it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace onnx {
class GraphProto;
class NodeProto;
class ModelProto;
} // namespace onnx

namespace lwcc {

/// What the dynamo exporter says of a graph input or initializer in its
/// value metadata (ValueInfoProto field 4, IR version 10, read from the
/// unknown fields of the older ONNX protos lwcc may be built with): the
/// PyTorch state it is ("pkg.torch.export.graph_signature.InputSpec.kind":
/// PARAMETER, BUFFER, ..., and whether a buffer is persistent), or the
/// values its optimizer folded it from ("pkg.onnxscript.optimizer.
/// folded_from", a Python list of names).
struct ExportedValue {
  std::string kind;
  bool transient = false; ///< a non-persistent buffer
  std::vector<std::string> foldedFrom;
};

/// What the dynamo exporter's value metadata says of the graph's inputs and
/// initializers, by name (those it says something of).
std::map<std::string, ExportedValue> exportedValues(const onnx::GraphProto& graph);

/// Whether float initializer `name` is a constant of a dynamo export (one
/// whose `exported` values carry InputSpec.kind), not a weight: lwcc trains
/// the initializers the export marks PARAMETER (or BUFFER: batch norm's
/// running statistics), and those its optimizer folded from one value alone
/// (a weight's transpose: the same update, laid out otherwise). Anything
/// else it wrote (a scalar exponent, a causal mask, a rotary table, a table
/// folded from several values) stays as written. False for any other file.
bool exportConstant(const std::string& name, const std::map<std::string, ExportedValue>& exported);

/// What to do with an initializer several nodes read as a trainable input.
enum class TiedInitializers {
  Auto,  ///< each initializer by how the nodes read it (see planInitializerSplit)
  Untie, ///< one param per consumer (the network before deduplication)
  Keep,  ///< one tied param for the trainable consumers; gradients summed
};

/// The choice for the whole file and, by initializer name, choices that
/// override it (`--tied-initializers=auto,keep:lm_head.weight,untie:NAME`).
struct TiedChoice {
  TiedInitializers mode = TiedInitializers::Auto;
  std::map<std::string, TiedInitializers> byName;
  TiedChoice(TiedInitializers m = TiedInitializers::Auto) : mode(m) {}
  TiedInitializers of(const std::string& name) const {
    auto it = byName.find(name);
    return it == byName.end() ? mode : it->second;
  }
};

/// Parses a comma-separated list of `auto`, `untie` or `keep` (the file's
/// choice, at most one; default auto) and `keep:NAME` or `untie:NAME` (one
/// initializer's, each name once). The error says which entry is wrong.
llvm::Expected<TiedChoice> parseTiedChoice(const std::string& spec);

/// The rewrite of a graph's shared initializers. Node indexes refer to the
/// GraphProto the plan was made for.
struct InitializerSplit {
  struct Copy {
    std::string name;   ///< the new initializer
    std::string source; ///< the initializer whose value it starts from
    /// Identity nodes to drop when this copy is made (its name was theirs).
    std::vector<int> replacesNodes;
    /// Node inputs (node, input index) that read this copy.
    std::vector<std::pair<int, int>> readers;
  };
  std::vector<Copy> copies;
  /// For each split initializer, the Identity nodes that alias it.
  std::map<std::string, std::vector<int>> aliasNodes;

  bool empty() const { return copies.empty(); }
};

/// Plans the split of `graph`'s shared float initializers. With Auto, each
/// initializer read as a trainable input by several nodes is decided from
/// how they read it:
///  - a lookup table of a Gather (input 0) that another node also reads as
///    a weight (a Transpose, MatMul or Gemm: the output layer of GPT-2 and
///    BERT tied to the token embedding) is one PyTorch param used twice:
///    kept tied;
///  - a vector (rank 1: the norms' scales and shifts, biases, which both
///    exporters deduplicate when they start equal) is untied;
///  - anything else of rank 2 or more read by several nodes (one weight
///    applied twice, or equal weights an exporter deduplicated) cannot be
///    told apart from the file: an error names the initializer and its
///    readers, and --tied-initializers=keep or untie decides, for the file
///    or (keep:NAME, untie:NAME) for that initializer.
/// A choice by name overrides the file's for that initializer; a name that
/// is no float initializer several nodes read as a weight is an error.
llvm::Expected<InitializerSplit> planInitializerSplit(const onnx::GraphProto& graph,
                                                      const TiedChoice& choice);

/// The graph's nodes after `split`: node inputs renamed to their copies,
/// and Identity nodes dropped when a copy took their output's name or when
/// nothing reads their output any more.
struct RewrittenNodes {
  /// The kept nodes in graph order; rewritten ones point into `storage`.
  std::vector<const onnx::NodeProto*> nodes;
  std::vector<std::unique_ptr<onnx::NodeProto>> storage;
  /// Split initializers that no node reads any more (an export drops them).
  std::set<std::string> unreadSources;
};
RewrittenNodes applyInitializerSplit(const onnx::GraphProto& graph, const InitializerSplit& split);

/// A warning for a model that looks exported from PyTorch with batch norms
/// folded into the convolutions (lwcc would train a network without them):
/// convolutions reading tensors the TorchScript exporter's constant folding
/// made ("onnx::Conv_N"), or that the dynamo exporter's optimizer marks as
/// fused; else convolutions whose all-zero bias that optimizer removed (a
/// trainable param lost). "" when there are none.
std::string exportedTrainingWarning(const onnx::ModelProto& model);

} // namespace lwcc
