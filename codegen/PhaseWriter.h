//===- PhaseWriter.h - Generated functions from IR ops ------------*- C++ -*-===//
//
// The parts of codegen that single- and multi-device trainers share: C names
// for values, where each value lives (a StepBuffers region and an offset),
// the optimizer settings, and PhaseWriter, which writes ops as runtime calls
// into function bodies (one per stream, with the scheduled IR's events).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/Emitters.h"
#include "ir/IR.h"
#include "ir/Printer.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

namespace lwcc::codegen {

/// A C identifier for a value: v_<name>, made unique.
class Names {
public:
  std::string operator()(const Value* v) {
    auto it = names_.find(v);
    if (it != names_.end())
      return it->second;
    std::string base = "v_";
    for (char c : v->name())
      base += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    if (v->name().empty())
      base += std::to_string(names_.size());
    std::string n = base;
    for (int k = 2; used_.count(n); ++k)
      n = base + "_" + std::to_string(k);
    used_.insert(n);
    return names_.emplace(v, n).first->second;
  }

private:
  std::map<const Value*, std::string> names_;
  std::set<std::string> used_;
};

inline std::string cString(const std::string& s) { return quoteString(s); }

/// The IR statement of `op`, as a one-line comment (values by C name).
inline std::string statement(const Op& op, Names& names) {
  std::string text;
  for (unsigned i = 0; i < op.numResults(); ++i)
    text += (i ? ", " : "") + names(op.result(i));
  text += (op.numResults() ? " = " : "") + std::string(op.mnemonic()) + "(";
  for (unsigned i = 0; i < op.numOperands(); ++i)
    text += (i ? ", " : "") + names(op.operand(i));
  text += ")";
  for (unsigned i = 0; i < op.numResults(); ++i)
    text += (i ? ", " : " : ") + op.result(i)->type().str();
  if (!op.loc().name.empty())
    text += "  (" + op.loc().name + ")";
  if (op.annotations().microBatch)
    text += " @mb(" + std::to_string(*op.annotations().microBatch) + ")";
  return text;
}

/// Where each value lives: a buffer of StepBuffers and an offset in it.
using Places = std::map<const Value*, std::pair<std::string, int64_t>>;

/// The optimizer settings the update ops share (and the loss's label
/// smoothing, the gradients' clipping norm); they become the trainer's
/// defaults and the generated calls read them from `h` (StepBuffers::hyper).
struct HyperDefaults {
  std::string family = "Hyper::None";
  std::string fields; ///< assignments to model.defaults
};

inline llvm::Expected<HyperDefaults> hyperDefaults(const Graph& g) {
  HyperDefaults d;
  const Op *update = nullptr, *schedule = nullptr, *xent = nullptr, *clip = nullptr;
  for (const auto& op : g.ops()) {
    if (op->kind() == OpKind::ClipCoef) {
      if (clip && clip->getFloat("max_norm") != op->getFloat("max_norm"))
        return op->emitError("codegen: the clip_coef ops differ in max_norm");
      clip = op.get();
    }
    if (op->kind() == OpKind::SoftmaxXent || op->kind() == OpKind::SoftmaxXentGrad) {
      if (xent && xent->getFloat("label_smoothing") != op->getFloat("label_smoothing"))
        return op->emitError("codegen: the softmax_xent ops differ in label_smoothing");
      xent = op.get();
    }
    if (op->kind() == OpKind::SgdUpdate || op->kind() == OpKind::AdamUpdate) {
      // Parameter groups differ in lr_scale and group_decay only.
      auto shared = [](const Op* o) {
        auto a = o->attrs();
        a.erase(std::remove_if(a.begin(), a.end(),
                               [](const NamedAttr& n) {
                                 return n.name == "lr_scale" || n.name == "group_decay";
                               }),
                a.end());
        return a;
      };
      if (update && (update->kind() != op->kind() || shared(update) != shared(op.get())))
        return op->emitError("codegen: the update ops do not share one optimizer's settings");
      update = op.get();
    } else if (op->kind() == OpKind::LrSchedule) {
      if (schedule && schedule->attrs() != op->attrs())
        return op->emitError("codegen: the lr_schedule ops differ");
      schedule = op.get();
    }
  }
  std::ostringstream f;
  if (update && update->kind() == OpKind::SgdUpdate) {
    d.family = "Hyper::Sgd";
    f << "  model.defaults.momentum = " << num(update->getFloat("momentum")) << ";\n"
      << "  model.defaults.weightDecay = " << num(update->getFloat("weight_decay")) << ";\n"
      << "  model.defaults.nesterov = " << update->getInt("nesterov") << ";\n";
  } else if (update) {
    d.family = "Hyper::Adam";
    f << "  model.defaults.beta1 = " << num(update->getFloat("beta1")) << ";\n"
      << "  model.defaults.beta2 = " << num(update->getFloat("beta2")) << ";\n"
      << "  model.defaults.epsilon = " << num(update->getFloat("epsilon")) << ";\n"
      << "  model.defaults.weightDecay = " << num(update->getFloat("weight_decay")) << ";\n"
      << "  model.defaults.decoupled = " << update->getInt("decoupled") << ";\n";
  }
  if (schedule) {
    const std::string& k = schedule->getString("kind");
    f << "  model.defaults.lr = " << num(schedule->getFloat("base_lr")) << ";\n"
      << "  model.defaults.schedule = "
      << (k == "step"     ? 1
          : k == "cosine" ? 2
                          : 0)
      << ";\n"
      << "  model.defaults.warmupSteps = " << schedule->getInt("warmup_steps") << ";\n"
      << "  model.defaults.totalSteps = " << schedule->getInt("total_steps") << ";\n"
      << "  model.defaults.stepSize = " << schedule->getInt("step_size") << ";\n"
      << "  model.defaults.gamma = " << num(schedule->getFloat("gamma")) << ";\n"
      << "  model.defaults.minLr = " << num(schedule->getFloat("min_lr")) << ";\n";
  }
  if (xent)
    f << "  model.defaults.labelSmoothing = " << num(xent->getFloat("label_smoothing")) << ";\n";
  if (clip)
    f << "  model.defaults.clipGradNorm = " << num(clip->getFloat("max_norm")) << ";\n";
  d.fields = f.str();
  return d;
}

/// The body of one generated function and the values it names.
struct Phase {
  std::ostringstream body;
  std::set<const Value*> used;
  bool hyper = false; ///< reads the optimizer settings (`h`)
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

/// The devices `op` runs on: its @dev, or for a communication op every
/// device its operands and results live on (its placement rule).
inline std::set<int64_t> devicesOf(const Op& op) {
  if (!op.info().isCommunication())
    return {opDevice(op)};
  std::set<int64_t> devices;
  for (unsigned i = 0; i < op.numOperands(); ++i)
    devices.insert(operandDevice(op, i));
  for (unsigned r = 0; r < op.numResults(); ++r)
    devices.insert(valueDevice(op.result(r)).value_or(0));
  return devices;
}

/// Writes a graph's code as function bodies over the views of `where`.
class PhaseWriter {
public:
  PhaseWriter(const Graph& g, const Places& where) : g_(g), where_(where) {}

  /// Which (producer, activation) pairs become one fused call (planFusions).
  enum class Fusions {
    None,
    /// CPU trainers: a conv2d, batch_norm_train, batch_norm or float add
    /// whose (first) result's only use is a relu or clip (the activation)
    /// written later in the same function becomes one call of the kernel's
    /// fused form (conv2dAct, batchNormTrainAct, batchNormAct, addAct) that
    /// writes the activation's result instead (the unfused result is never
    /// read).
    All,
    /// CUDA trainers: only a conv2d and a relu written in place over its
    /// result (conv2dAct with Activation::Relu: one cuDNN plan of
    /// convolution, bias and ReLU); cuDNN's plans take no other pair here.
    ConvRelu,
  };
  void fuseActivations(Fusions f) { fusions_ = f; }

  /// CPU trainers: the values kept in nChw8c (codegen/Layouts.h); their
  /// views say so.
  void setBlocked(std::set<const Value*> blocked) { blocked_ = std::move(blocked); }

  /// Declarations of the views of `used`, in graph order (inputs, params,
  /// op results), for the top of a function body.
  std::string views(const std::set<const Value*>& used) {
    std::ostringstream out;
    auto declare = [&](const Value* v) {
      if (!used.count(v))
        return;
      const auto& [region, offset] = where_.at(v);
      out << "  const TensorView " << names_(v) << " = at(" << region << ", " << offset << ", "
          << dtypeEnum(v->type().dtype) << ", " << ints(v->type().shape)
          << (blocked_.count(v) ? ", Layout::NChw8c" : "") << "); // " << v->type().str()
          << (blocked_.count(v) ? " nChw8c" : "") << "\n";
    };
    for (const auto& in : g_.inputs())
      declare(in.get());
    for (const auto& p : g_.params())
      declare(p.get());
    for (const auto& op : g_.ops())
      for (unsigned r = 0; r < op->numResults(); ++r)
        declare(op->result(r));
    return out.str();
  }

  /// A one-stream graph's code, op #i into code.phases[phaseOf(i)]. A graph
  /// whose ops use several streams is written per stream (writeDevice).
  llvm::Error write(GraphCode& code, const std::function<size_t(size_t)>& phaseOf) {
    {
      std::vector<const Op*> order;
      std::vector<size_t> phases;
      size_t i = 0;
      for (const auto& op : g_.ops()) {
        if (op->kind() != OpKind::Constant) {
          order.push_back(op.get());
          phases.push_back(phaseOf(i));
        }
        ++i;
      }
      planFusions(order, [&](size_t k) { return phases[k] == phases[k + 1]; });
    }
    size_t index = 0;
    for (const auto& opPtr : g_.ops()) {
      const Op& op = *opPtr;
      ++index;
      if (op.annotations().stream.value_or(0) != 0 || op.info().isEvent())
        return op.emitError("codegen: a step of several streams is written one function per "
                            "stream");
      Phase* phase = &code.init;
      if (op.kind() != OpKind::Constant) {
        size_t k = phaseOf(index - 1);
        if (code.phases.size() <= k)
          code.phases.resize(k + 1);
        phase = &code.phases[k];
      }
      for (const Value* v : op.operands())
        phase->used.insert(v);
      for (unsigned r = 0; r < op.numResults(); ++r)
        phase->used.insert(op.result(r));
      phase->hyper |= !hyperParams(op).empty();
      std::ostringstream& out = phase->body;
      out << "\n  // " << statement(op, names_) << "\n";
      auto call = callOf(op);
      if (!call)
        return call.takeError();
      if (nothingToDo(out, op, *call))
        continue;
      std::string label = op.loc().name.empty() ? std::string(op.mnemonic()) : op.loc().name;
      if (fused(out, op, *call)) {
        out << "  if (b.mark)\n    b.mark(b.markContext, "
            << cString(std::string(op.mnemonic()) + " " + label) << ");\n";
        continue;
      }
      out << "  if (!" << *call << ")\n    return *failed = " << cString(label) << ", false;\n";
      if (op.kind() != OpKind::Constant)
        out << "  if (b.mark)\n    b.mark(b.markContext, "
            << cString(std::string(op.mnemonic()) + " " + label) << ");\n";
    }
    return llvm::Error::success();
  }

  Names& names() { return names_; }

  /// True, after saying why in a comment, when `call` is empty: a view or
  /// an update written in place over its param leaves no code.
  bool nothingToDo(std::ostringstream& out, const Op& op, const std::string& call) {
    if (!call.empty())
      return false;
    if (op.kind() == OpKind::Assign)
      out << "  // (" << names_(op.operand(1)) << " was written in place over "
          << names_(op.operand(0)) << ": nothing to copy)\n";
    else
      out << "  // (a view of " << names_(op.operand(0)) << ": same bytes, nothing to do)\n";
    return true;
  }

  /// Whether `op` runs on `device`, or takes part there (a communication
  /// op with `device` among its devices, src or dst).
  static bool onDevice(const Op& op, int64_t device) { return devicesOf(op).count(device) > 0; }

  /// One device's code in a step of several devices or streams: its
  /// constants into `code.init`, the ops of its stream s in graph order into
  /// `code.streams[s]`, the record and wait ops of the scheduled IR as the
  /// runtime's recordEvent and waitEvent (codegen adds no synchronization of
  /// its own). `commIds` numbers the communication ops.
  llvm::Error writeDevice(DeviceCode& code, int64_t device,
                          const std::map<const Op*, int>& commIds) {
    {
      // Each stream's ops in the order written: a fusion never spans an
      // event (a wait before the activation, or a record after the
      // producer, orders the two calls against another stream).
      std::map<int64_t, std::vector<const Op*>> orders;
      for (const auto& op : g_.ops())
        if (op->kind() != OpKind::Constant && onDevice(*op, device))
          orders[op->annotations().stream.value_or(0)].push_back(op.get());
      for (const auto& [s, order] : orders)
        planFusions(order, [&order = order](size_t k) {
          return !order[k]->info().isEvent() && !order[k + 1]->info().isEvent();
        });
    }
    auto check = [](const std::string& call, const std::string& label) {
      return "  if (!" + call + ")\n    return *failed = " + cString(label) + ", false;\n";
    };
    code.streams[0];
    for (const auto& opPtr : g_.ops()) {
      const Op& op = *opPtr;
      if (!onDevice(op, device))
        continue;
      const int64_t stream = op.annotations().stream.value_or(0);
      Phase& phase = op.kind() == OpKind::Constant ? code.init : code.streams[stream];
      std::ostringstream& out = phase.body;
      std::string label = op.loc().name.empty() ? std::string(op.mnemonic()) : op.loc().name;
      if (op.info().isEvent()) {
        auto call = callOf(op);
        if (!call)
          return call.takeError();
        out << "\n  // " << op.mnemonic() << " event " << op.getInt("event")
            << (op.kind() == OpKind::Wait ? ": the ops below run after its record\n"
                                          : ": the ops above have run\n")
            << check(*call, label);
        continue;
      }
      for (const Value* v : op.operands())
        if (where_.count(v))
          phase.used.insert(v);
      for (unsigned r = 0; r < op.numResults(); ++r)
        if (where_.count(op.result(r)))
          phase.used.insert(op.result(r));
      phase.hyper |= !hyperParams(op).empty();
      out << "\n  // " << statement(op, names_) << "\n";
      auto call =
          op.info().isCommunication() ? commCallOf(op, device, commIds.at(&op)) : callOf(op);
      if (!call)
        return call.takeError();
      if (nothingToDo(out, op, *call))
        continue;
      if (fused(out, op, *call)) {
        out << "  if (b.mark)\n    b.mark(b.markContext, "
            << cString(std::string(op.mnemonic()) + " " + label) << ");\n";
        continue;
      }
      out << check(*call, label);
      if (op.kind() != OpKind::Constant)
        out << "  if (b.mark)\n    b.mark(b.markContext, "
            << cString(std::string(op.mnemonic()) + " " + label) << ");\n";
    }
    return llvm::Error::success();
  }

  /// This device's part of communication op `op` (number `id` of the step).
  llvm::Expected<std::string> commCallOf(const Op& op, int64_t device, int id) {
    std::vector<int64_t> devices =
        op.hasAttr("devices") ? op.getInts("devices") : std::vector<int64_t>{};
    int64_t i = -1; // this device's position in `devices`
    for (size_t k = 0; k < devices.size(); ++k)
      if (devices[k] == device) {
        if (i >= 0)
          return op.emitError("codegen: device " + std::to_string(device) +
                              " appears twice in the op's devices");
        i = static_cast<int64_t>(k);
      }
    const unsigned p = static_cast<unsigned>(devices.size());
    auto ref = [&](bool mine, const Value* v) {
      return mine ? "&" + names_(v) : std::string("nullptr");
    };
    auto sizesAlong = [&](int64_t axis, bool operands) {
      std::vector<int64_t> sizes;
      unsigned n = operands ? op.numOperands() : op.numResults();
      for (unsigned k = 0; k < n; ++k)
        sizes.push_back((operands ? op.operand(k) : op.result(k))->type().shape[axis]);
      return sizes;
    };
    std::string head = std::string(op.info().kernel.fn ? op.info().kernel.fn : "?") + "(b, " +
                       std::to_string(id) + ", ";
    const unsigned at = static_cast<unsigned>(std::max<int64_t>(i, 0));
    switch (op.kind()) {
    case OpKind::AllReduce: {
      std::string in = "{", out = "{";
      for (unsigned t = 0; t < op.numOperands() / p; ++t) {
        in += (t ? ", " : "") + names_(op.operand(t * p + at));
        out += (t ? ", " : "") + names_(op.result(t * p + at));
      }
      return head + ints(devices) + ", " + in + "}, " + out + "})";
    }
    case OpKind::AllGather: {
      int64_t axis = op.getInt("axis");
      return head + ints(devices) + ", " + std::to_string(axis) + ", " +
             ints(sizesAlong(axis, true)) + ", " + names_(op.operand(at)) + ", " +
             names_(op.result(at)) + ")";
    }
    case OpKind::ReduceScatter: {
      int64_t axis = op.getInt("axis");
      return head + ints(devices) + ", " + std::to_string(axis) + ", " + ints(op.getInts("sizes")) +
             ", " + names_(op.operand(at)) + ", " + names_(op.result(at)) + ")";
    }
    case OpKind::Broadcast: {
      int64_t src = op.getInt("src");
      return head + std::to_string(src) + ", " + ints(devices) + ", " +
             ref(device == src, op.operand(0)) + ", " + ref(i >= 0, op.result(at)) + ")";
    }
    case OpKind::ReduceTo: {
      int64_t dst = op.getInt("dst");
      return head + ints(devices) + ", " + std::to_string(dst) + ", " +
             ref(i >= 0, op.operand(at)) + ", " + ref(device == dst, op.result(0)) + ")";
    }
    case OpKind::DeviceCopy: {
      int64_t src = op.getInt("src"), dst = op.getInt("dst");
      return head + std::to_string(src) + ", " + std::to_string(dst) + ", " +
             ref(device == src, op.operand(0)) + ", " + ref(device == dst, op.result(0)) + ")";
    }
    case OpKind::Shard: {
      int64_t src = op.getInt("src"), axis = op.getInt("axis");
      return head + std::to_string(src) + ", " + ints(devices) + ", " + std::to_string(axis) +
             ", " + ints(op.getInts("sizes")) + ", " + ref(device == src, op.operand(0)) + ", " +
             ref(i >= 0, op.result(at)) + ")";
    }
    case OpKind::Unshard: {
      int64_t dst = op.getInt("dst"), axis = op.getInt("axis");
      return head + ints(devices) + ", " + std::to_string(dst) + ", " + std::to_string(axis) +
             ", " + ints(sizesAlong(axis, true)) + ", " + ref(i >= 0, op.operand(at)) + ", " +
             ref(device == dst, op.result(0)) + ")";
    }
    default:
      return op.emitError("codegen: no runtime call for this communication op");
    }
  }

private:
  /// The runtime call of `op`; "" for a view that needs no copy.
  llvm::Expected<std::string> callOf(const Op& op) {
    auto list = [&](const std::vector<const Value*>& vs) {
      std::string s = "{";
      for (size_t i = 0; i < vs.size(); ++i)
        s += (i ? ", " : "") + names_(vs[i]);
      return s + "}";
    };
    const KernelSpec& k = op.info().kernel;
    auto formatter = paramsFormatters().find(op.kind());
    auto params = [&]() -> std::string {
      std::string h = hyperParams(op);
      if (!h.empty())
        return h;
      return formatter == paramsFormatters().end() ? "" : formatter->second(op);
    };
    const std::string fn = k.fn ? k.fn : "";
    switch (k.args) {
    case KernelSpec::Fill: {
      std::vector<double> fv;
      std::vector<int64_t> iv;
      if (op.hasAttr("value"))
        fv = op.getFloats("value");
      if (op.hasAttr("ivalue"))
        iv = op.getInts("ivalue");
      return fn + "(" + names_(op.result()) + ", FillParams{" + floats(fv) + ", " + ints(iv) + "})";
    }
    case KernelSpec::Assign:
      // An update written over its param leaves nothing to copy.
      if (where_.at(op.operand(0)) == where_.at(op.operand(1)))
        return std::string();
      return fn + "(" + names_(op.operand(1)) + ", " + names_(op.operand(0)) + ")";
    case KernelSpec::OperandList: {
      std::vector<const Value*> xs(op.operands().begin(), op.operands().end());
      return fn + "(" + list(xs) + ", " + names_(op.result()) + ", " + params() + ")";
    }
    case KernelSpec::ResultList: {
      std::vector<const Value*> rs;
      for (unsigned r = 0; r < op.numResults(); ++r)
        rs.push_back(op.result(r));
      return fn + "(" + names_(op.operand(0)) + ", " + list(rs) + ", " + params() + ")";
    }
    case KernelSpec::Plain:
    case KernelSpec::OptionalLast:
      break;
    case KernelSpec::Comm:
      return op.emitError("codegen: a communication op in a one-device step");
    case KernelSpec::Event:
      return fn + "(b, " + std::to_string(op.getInt("event")) + ")";
    }
    if (fn.empty() || formatter == paramsFormatters().end())
      return op.emitError("codegen: no runtime kernel for this op");
    // A view whose result shares its operand's bytes needs no copy.
    if (fn == "copy" && where_.at(op.operand(0)) == where_.at(op.result()))
      return std::string();
    std::vector<std::string> args;
    unsigned fixed = op.info().minOperands;
    const bool optionalLast = k.args == KernelSpec::OptionalLast;
    for (unsigned i = 0; i < op.numOperands(); ++i)
      args.push_back((optionalLast && i >= fixed ? "&" : "") + names_(op.operand(i)));
    if (optionalLast && op.numOperands() == fixed)
      args.push_back("nullptr");
    // A fused call writes its activation's result in place of its first,
    // and takes the activation last.
    for (unsigned r = 0; r < op.numResults(); ++r)
      args.push_back(names_(r == 0 && fusion_ ? fusion_->result() : op.result(r)));
    std::string p = params();
    if (!p.empty())
      args.push_back(p);
    if (fusion_)
      args.push_back(fusion_->kind() == OpKind::Relu
                         ? std::string("Activation{Activation::Relu}")
                         : "Activation{Activation::Clip, " + num(fusion_->getFloat("min")) + ", " +
                               num(fusion_->getFloat("max")) + "}");
    std::string call = fn + (fusion_ ? "Act(" : "(");
    for (size_t i = 0; i < args.size(); ++i)
      call += (i ? ", " : "") + args[i];
    return call + ")";
  }

  /// The bytes an op reads or writes in this device's regions (its
  /// operands and results placed here).
  struct Access {
    std::string region;
    int64_t begin, end;
  };

  std::vector<Access> accessesOf(const Op& op) const {
    std::vector<Access> out;
    auto add = [&](const Value* v) {
      auto it = where_.find(v);
      if (it == where_.end())
        return; // another device's value (a communication op's other end)
      const auto& [region, offset] = it->second;
      out.push_back({region, offset, offset + v->type().sizeInBytes()});
    };
    for (const Value* v : op.operands())
      add(v);
    for (unsigned r = 0; r < op.numResults(); ++r)
      add(op.result(r));
    return out;
  }

  /// Marks the (producer, activation) pairs of `order` (the ops of one
  /// function, in the order written) that fuse: the activation (relu, or
  /// clip) is the only use of the producer's first result, adjacent(k)
  /// says ops k and k+1 land in one function with no event op between
  /// them, and no op
  /// written between the two touches the activation's result bytes (the
  /// fused call writes them early). Fusions::ConvRelu takes only a conv2d
  /// and a relu whose result has the convolution result's bytes (run in
  /// place), so the fused call's result never shares bytes with its input.
  template <typename Adjacent>
  void planFusions(const std::vector<const Op*>& order, Adjacent adjacent) {
    if (fusions_ == Fusions::None)
      return;
    const bool convRelu = fusions_ == Fusions::ConvRelu;
    std::map<const Op*, size_t> at;
    for (size_t k = 0; k < order.size(); ++k)
      at[order[k]] = k;
    for (size_t k = 0; k + 1 < order.size(); ++k) {
      const Op* producer = order[k];
      OpKind kind = producer->kind();
      if (kind != OpKind::Conv2d && kind != OpKind::BatchNormTrain && kind != OpKind::BatchNorm &&
          kind != OpKind::Add)
        continue;
      if (convRelu && kind != OpKind::Conv2d)
        continue;
      const Value* v = producer->result(0);
      const DType t = v->type().dtype;
      if ((t != DType::F32 && t != DType::F64) || v->uses().size() != 1)
        continue;
      const Op* relu = v->uses().front().user;
      auto it = relu ? at.find(relu) : at.end();
      if (it == at.end() || it->second <= k ||
          (relu->kind() != OpKind::Relu && relu->kind() != OpKind::Clip) ||
          !where_.count(relu->result()))
        continue;
      if (convRelu && (relu->kind() != OpKind::Relu || !where_.count(v) ||
                       where_.at(v) != where_.at(relu->result())))
        continue;
      const size_t r = it->second;
      const auto& [region, offset] = where_.at(relu->result());
      const int64_t end = offset + relu->result()->type().sizeInBytes();
      bool clear = true;
      for (size_t j = k; j < r && clear; ++j) {
        clear = adjacent(j);
        if (j > k)
          for (const Access& a : accessesOf(*order[j]))
            clear &= !(a.region == region && a.begin < end && offset < a.end);
      }
      if (!clear)
        continue;
      fusedInto_[producer] = relu;
      fusedFrom_.insert(relu);
    }
  }

  /// A fused pair's relu gets a note instead of a call (its events and
  /// mark stay); its producer, the fused kernel's call (in `call`). False
  /// for other ops.
  bool fused(std::ostringstream& out, const Op& op, std::string& call) {
    if (fusedFrom_.count(&op)) {
      out << "  // (computed by the fused call above)\n";
      return true;
    }
    auto it = fusedInto_.find(&op);
    if (it != fusedInto_.end()) {
      fusion_ = it->second;
      auto fusedCall = callOf(op);
      fusion_ = nullptr;
      if (fusedCall)
        call = *fusedCall;
      else
        llvm::consumeError(fusedCall.takeError()); // the caller already wrote the plain call
    }
    return false;
  }

  const Graph& g_;
  const Places& where_;
  Names names_;
  Fusions fusions_ = Fusions::None;
  std::set<const Value*> blocked_;
  std::map<const Op*, const Op*> fusedInto_; ///< producer -> its activation
  std::set<const Op*> fusedFrom_;            ///< the activations
  const Op* fusion_ = nullptr;               ///< while callOf writes a fused call: its activation
};

/// Places the results of a planned graph that live on `device` at their
/// @buf offsets in `region` (that device's arena); returns the arena's size.
inline llvm::Expected<int64_t> placeResults(const Graph& g, Places& where,
                                            const std::string& region, int64_t* classes,
                                            int64_t device = 0) {
  int64_t arenaBytes = 0;
  for (const auto& op : g.ops()) {
    if (op->numResults() && !op->annotations().bufferOffsets)
      return op->emitError("codegen: has no @buf; run memory-plan first");
    for (unsigned r = 0; r < op->numResults(); ++r) {
      const Value* v = op->result(r);
      if (valueDevice(v).value_or(0) != device)
        continue; // another device's arena
      int64_t off = (*op->annotations().bufferOffsets)[r];
      if (off == -1) {
        // Written over the param it updates (the memory plan's kOverParam):
        // the result's only use is that param's assign.
        const Op* user = v->uses().size() == 1 ? v->uses().front().user : nullptr;
        if (!user || user->kind() != OpKind::Assign || !where.count(user->operand(0)))
          return op->emitError("codegen: @buf(-1) on a result that is not assigned to a param");
        where[v] = where.at(user->operand(0));
        continue;
      }
      where[v] = {region, off};
      arenaBytes = std::max(arenaBytes, alignUp(off + v->type().sizeInBytes()));
    }
    if (classes && op->kind() == OpKind::SoftmaxXent)
      *classes = op->operand(0)->type().shape[1];
  }
  return arenaBytes;
}

/// An assembler string literal for a file name.
inline std::string asmString(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += "\\\\";
    out += c;
  }
  return out;
}

/// The assembler statement that embeds `file` (found on the assembler's
/// include path, or absolute) as the bytes between `symbol`_begin and
/// `symbol`_end.
inline std::string incbin(const std::string& symbol, const std::string& file) {
  std::ostringstream os;
  os << "asm(\".section .rodata\\n.balign 64\\n.globl " << symbol << "_begin\\n"
     << symbol << "_begin:\\n.incbin \\\"" << asmString(file) << "\\\"\\n.globl " << symbol
     << "_end\\n"
     << symbol << "_end:\\n.byte 0\\n.previous\\n\");\n";
  return os.str();
}

inline std::string incbinSymbols(const std::string& symbol) {
  return "extern \"C\" const unsigned char " + symbol + "_begin[], " + symbol + "_end[];\n";
}

} // namespace lwcc::codegen
