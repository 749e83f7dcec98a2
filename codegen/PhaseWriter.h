//===- PhaseWriter.h - Generated functions from IR ops ------------*- C++ -*-===//
//
// The parts of codegen that single- and multi-device trainers share: where
// each value lives (a StepBuffers region and an offset), the optimizer
// settings, and PhaseWriter, which writes ops as runtime calls into
// function bodies (one per phase or stream, with the scheduled IR's events)
// and the views and offset constants those bodies use.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/Emitters.h"
#include "codegen/FusedKernels.h"
#include "codegen/Names.h"
#include "ir/IR.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace lwcc::codegen {

/// A C++ string literal.
std::string cString(const std::string& s);

/// The IR statement of `op`, as a one-line comment (values by C name).
std::string statement(const Op& op, Names& names);

/// Where each value lives: a buffer of StepBuffers and an offset in it.
using Places = std::map<const Value*, std::pair<std::string, int64_t>>;

/// The optimizer settings the update ops share (and the loss's label
/// smoothing, the gradients' clipping norm); they become the trainer's
/// defaults and the generated calls read them from `h` (StepBuffers::hyper).
struct HyperDefaults {
  std::string family = "Hyper::None";
  std::string fields; ///< assignments to model.defaults
};

llvm::Expected<HyperDefaults> hyperDefaults(const Graph& g);

/// The code of one generated function: its ops in order, each with the
/// values it names (a long function is written as parts of a bounded number
/// of ops, each viewing only what its ops use).
struct Phase {
  struct OpCode {
    std::string text; ///< the IR statement and the call
    std::set<const Value*> used;
    bool hyper = false; ///< reads the optimizer settings (`h`)
  };
  std::vector<OpCode> ops;
};

/// The code of one graph on one stream: `init` (its constants, once) and
/// `phases` (the other ops in graph order, op #i into phases[phaseOf(i)],
/// where phaseOf never decreases).
struct GraphCode {
  Phase init;
  std::vector<Phase> phases;
};

/// The code of one device of a step of several devices or streams: its
/// constants and one function body per stream.
struct DeviceCode {
  Phase init;
  std::map<int64_t, Phase> streams;
};

/// Writes a graph's code as function bodies over the views of `where`,
/// naming values with `names` and shapes with `shapes`.
class PhaseWriter {
public:
  PhaseWriter(const Graph& g, const Places& where, Names& names, ShapeNames& shapes)
      : g_(g), where_(where), names_(names), shapes_(shapes) {}

  /// Which (producer, activation) pairs become one fused call (planFusions).
  /// Both CPU and CUDA trainers also fuse a relu_grad into the batch_norm_grad
  /// written right after it that alone reads it (batchNormGradAct; the
  /// rule is ir/FusedOps.h's gradPrologueOf), and their 16-bit batch norms'
  /// relus, unless fuseCalls(false).
  enum class Fusions {
    None,
    /// CPU trainers: a conv2d, batch_norm_train, batch_norm or float add
    /// whose (first) result's only use is a relu or clip (the activation)
    /// written later in the same function becomes one call of the kernel's
    /// fused form (conv2dAct, batchNormTrainAct, batchNormAct, addAct) that
    /// writes the activation's result instead (the unfused result is never
    /// read).
    All,
    /// CUDA trainers: a relu written in place over the result of a float
    /// conv2d (conv2dAct: one cuDNN plan of convolution, bias and ReLU) or
    /// of a 16-bit batch_norm_train or batch_norm (batchNormTrainAct,
    /// batchNormAct: lwcc's own kernels); nothing else (ir/FusedOps.h's
    /// epilogueOf).
    Cuda,
  };
  void fuseActivations(Fusions f) { fusions_ = f; }

  /// CPU trainers: the values kept in nChw8c (codegen/Layouts.h); their
  /// views say so.
  void setBlocked(std::set<const Value*> blocked) { blocked_ = std::move(blocked); }

  /// The kernels the trainer's source has for its fused ops.
  void setFusedKernels(const FusedKernels* kernels) { fusedKernels_ = kernels; }
  /// Whether runs of optimizer updates become multi-tensor calls and a
  /// batch norm's relu and relu_grad join its calls (CodegenOptions::fuseCalls).
  void fuseCalls(bool on) { fuseCalls_ = on; }

  /// A CUDA device of several: the inputs it reads and the rows it holds
  /// of each (its views of them are those rows; its dim-0 slices of them
  /// start from the first).
  void setInputRows(std::map<const Value*, HeldRows> rows) { inputRows_ = std::move(rows); }

  /// Declarations of the views of `used`, in graph order (inputs, params,
  /// op results), for the top of a function body: each at its offset
  /// constant, with its shape constant.
  std::string views(const std::set<const Value*>& used);

  /// The offset constants of the values in `region` that views() declared,
  /// in graph order, one `constexpr` a line; values in `written` are left
  /// out, and the values written join it. A value at a place `same` names
  /// (another graph's constant for the same bytes) is defined as it.
  std::string
  offsetConstants(const std::string& region, std::set<const Value*>& written,
                  const std::map<std::pair<std::string, int64_t>, std::string>* same = nullptr);
  /// The places of the inputs and params this writer declared, with their
  /// offset constants: what another graph's values at the same bytes are
  /// named.
  std::map<std::pair<std::string, int64_t>, std::string> leafConstants();

  /// A one-stream graph's code, op #i into code.phases[phaseOf(i)]. A graph
  /// whose ops use several streams is written per stream (writeDevice).
  llvm::Error write(GraphCode& code, const std::function<size_t(size_t)>& phaseOf);

  /// One device's code in a step of several devices or streams: its
  /// constants into `code.init`, the ops of its stream s in graph order into
  /// `code.streams[s]`, the record and wait ops of the scheduled IR as the
  /// runtime's recordEvent and waitEvent (codegen adds no synchronization of
  /// its own). `commIds` numbers the communication ops.
  llvm::Error writeDevice(DeviceCode& code, int64_t device,
                          const std::map<const Op*, int>& commIds);

private:
  /// Writes `op` into `phase`: the IR statement, then its call (`call`, or
  /// `device`'s part of a communication op) under the source's check
  /// macros, or a note where it needs none.
  llvm::Error writeOp(Phase& phase, const Op& op, int64_t device,
                      const std::map<const Op*, int>* commIds);

  /// True, after saying why in a comment, when `call` is empty: a view or
  /// an update written in place over its param leaves no code.
  bool nothingToDo(std::ostringstream& out, const Op& op, const std::string& call);

  /// This device's part of communication op `op` (number `id` of the step).
  llvm::Expected<std::string> commCallOf(const Op& op, int64_t device, int id);

  /// The runtime call of `op`; "" for a view that needs no copy.
  llvm::Expected<std::string> callOf(const Op& op);

  /// The bytes an op reads or writes in this device's regions (its
  /// operands and results placed here).
  struct Access {
    std::string region;
    int64_t begin, end;
  };
  std::vector<Access> accessesOf(const Op& op) const;

  /// Marks the (producer, activation) pairs of `order` (the ops of one
  /// function, in the order written) that fuse: the activation (relu, or
  /// clip) is the only use of the producer's first result, adjacent(k)
  /// says ops k and k+1 land in one function with no event op between
  /// them, and no op written between the two touches the activation's
  /// result bytes (the fused call writes them early). Fusions::Cuda
  /// takes only a conv2d and a relu whose result has the convolution
  /// result's bytes (run in place), so the fused call's result never shares
  /// bytes with its input.
  /// Runs of sgd_update (or adam_update) ops with one lr in `order`, only
  /// in-place assigns between them, and runs of casts of float32 to one
  /// 16-bit type, `adjacent(k)` true for order[k] and order[k + 1] (the
  /// same function): each run becomes one multi-tensor call at its first op
  /// (sgdUpdateGroup, adamUpdateGroup, castGroup).
  void planUpdateGroups(const std::vector<const Op*>& order,
                        const std::function<bool(size_t)>& adjacent);
  /// The multi-tensor call of a run's first op.
  std::string groupCallOf(const std::vector<const Op*>& run);
  /// An update's parameter struct `params` with the factor of the clipping
  /// product it takes in (gradScales_), if any.
  std::string withGradScale(const Op& update, std::string params);
  void planFusions(const std::vector<const Op*>& order,
                   const std::function<bool(size_t)>& adjacent);

  /// A fused pair's relu gets a note instead of a call (its events and
  /// mark stay); its producer, the fused kernel's call (in `call`). False
  /// for other ops.
  bool fused(std::ostringstream& out, const Op& op, std::string& call);

  const Graph& g_;
  const Places& where_;
  Names& names_;
  ShapeNames& shapes_;
  Fusions fusions_ = Fusions::None;
  std::set<const Value*> blocked_;
  const FusedKernels* fusedKernels_ = nullptr;
  std::map<const Value*, HeldRows> inputRows_;
  std::set<const Value*> declared_;              ///< the values views() declared
  std::map<const Op*, const Op*> fusedInto_;     ///< producer -> its activation
  std::set<const Op*> fusedFrom_;                ///< the activations (and relu_grads)
  std::map<const Op*, const Op*> gradPrologues_; ///< batch_norm_grad -> the relu_grad it reads
  std::map<const Op*, const Op*> gradScales_;    ///< update -> the clipping product it takes in
  std::map<const Op*, std::vector<const Op*>> updateRuns_; ///< first update -> its run
  std::set<const Op*> inRun_;                              ///< the runs' other updates
  bool fuseCalls_ = true;
  const Op* fusion_ = nullptr;   ///< while callOf writes a fused call: its activation
  const Op* prologue_ = nullptr; ///< ... or the relu_grad a batch norm backward reads
};

/// Places the results of a planned graph that live on `device` at their
/// @buf offsets in `region` (that device's arena); returns the arena's size.
llvm::Expected<int64_t> placeResults(const Graph& g, Places& where, const std::string& region,
                                     int64_t* classes, int64_t device = 0);

/// The assembler statement that embeds `file` (found on the assembler's
/// include path, or absolute) as the bytes between `symbol`_begin and
/// `symbol`_end.
std::string incbin(const std::string& symbol, const std::string& file);

/// The declarations of the symbols incbin defines.
std::string incbinSymbols(const std::string& symbol);

} // namespace lwcc::codegen
