//===- TrainingSupport.h - Shared pieces of the training passes -*- C++ -*-===//
#pragma once

#include "ir/IR.h"
#include "ir/Params.h"

#include "llvm/ADT/CachedHashString.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/StringSaver.h"

#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace lwcc {

/// Initializer name of the step counter: an i64 scalar param, zero at the
/// start, that the optimizer increments after each step.
inline constexpr const char* kStepParam = "train.step";

/// The step counter param, created (zero-initialized) when missing.
Value* getOrCreateStepParam(Graph& g);
class UniqueNames;
/// The copy of the step counter on `device` (each device that needs the
/// step holds one), created when missing; named by `names` when given (a
/// pass that already holds the graph's names), else by uniqueValueName.
Value* getOrCreateStepParam(Graph& g, int64_t device, UniqueNames* names = nullptr);
/// The param bound to `initializer`, or null.
Value* findParam(const Graph& g, const std::string& initializer);
/// A value name no other value of `g` has, starting from `base`: `base`,
/// else `base.1`, `base.2`, ... (scans every name: for one name).
std::string uniqueValueName(const Graph& g, const std::string& base);

/// A set of names, each copied once into an arena (a step's tens of
/// thousands of value names, hashed once each).
class NameSet {
public:
  void reserve(size_t n) { set_.reserve(static_cast<unsigned>(n)); }
  /// Whether `name` was not in the set (it is now).
  bool insert(llvm::StringRef name) {
    llvm::CachedHashStringRef key(name);
    if (set_.contains(key))
      return false;
    set_.insert(llvm::CachedHashStringRef(saver_.save(name), key.hash()));
    return true;
  }

private:
  llvm::BumpPtrAllocator arena_;
  llvm::StringSaver saver_{arena_};
  llvm::DenseSet<llvm::CachedHashStringRef> set_;
};

/// The same names as uniqueValueName for a pass that names many values:
/// the graph's names are collected once, and each name handed out is
/// taken from then on. Names are only ever added, so the first free
/// suffix of a base never moves back: each base resumes its scan where the
/// last one stopped (replicating a value m times costs m names, not m^2).
class UniqueNames {
public:
  explicit UniqueNames(const Graph& g);
  std::string operator()(const std::string& base);

private:
  NameSet taken_;
  llvm::StringMap<int> nextSuffix_;
};
/// Whether `name` matches the glob `pattern`: `*` matches any run of
/// characters (none too), `?` any one character, others themselves.
bool globMatch(std::string_view pattern, std::string_view name);
/// The patterns of a pass option, separated by ';' (empty ones dropped).
std::vector<std::string> splitPatterns(const std::string& text);
/// Appends assign(target, value) at the end of the graph, on the target's
/// device.
void appendAssign(Graph& g, Value* target, Value* value, const Location& loc);
/// Whether `op` is the loss gradient's seed: the constant autodiff places
/// at loc "loss.grad", where the backward starts.
bool isGradientSeed(const Op& op);
/// Whether `op` is a forward op computed again for the backward (the
/// recompute pass's copies: loc "NAME.recompute").
bool isRecomputed(const Op& op);
/// The layers (loc names) of the forward ops the recompute pass may compute
/// again in `g` (a model's graph or a training step, up to the loss
/// gradient's seed), with the bytes of those ops' results, the most first
/// (equal ones by name): `recompute`'s top=K
/// takes the first K.
std::vector<std::pair<std::string, int64_t>> recomputableLayers(const Graph& g);
/// Whether `op` all_gathers shares of params (materialize's shard=fsdp).
bool gathersParamShares(const Op& op);
/// Whether `op` is such a gather made again for the backward (the regather
/// pass's copies: loc "NAME.regather").
bool isRegather(const Op& op);

} // namespace lwcc
