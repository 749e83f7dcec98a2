//===- PhaseWriter.h - Generated functions from IR ops ------------*- C++ -*-===//
//
// The parts of codegen that single- and multi-device trainers share: C names
// for values, where each value lives (a StepBuffers region and an offset),
// the optimizer settings, and PhaseWriter, which writes ops as runtime calls
// into function bodies, with the events that order streams.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/Emitters.h"
#include "ir/IR.h"
#include "ir/Printer.h"

#include "llvm/ADT/StringRef.h"

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

/// The optimizer settings the update ops share; they become the trainer's
/// defaults and the generated calls read them from `h` (StepBuffers::hyper).
struct HyperDefaults {
  std::string family = "Hyper::None";
  std::string fields; ///< assignments to model.defaults
};

inline llvm::Expected<HyperDefaults> hyperDefaults(const Graph& g) {
  HyperDefaults d;
  const Op *update = nullptr, *schedule = nullptr;
  for (const auto& op : g.ops()) {
    if (op->kind() == OpKind::SgdUpdate || op->kind() == OpKind::AdamUpdate) {
      if (update && (update->kind() != op->kind() || update->attrs() != op->attrs()))
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
  d.fields = f.str();
  return d;
}

/// The body of one generated function and the values it names.
struct Phase {
  std::ostringstream body;
  std::set<const Value*> used;
  bool hyper = false; ///< reads the optimizer settings (`h`)
};

/// The code of one graph: `init` (its constants, once), `phases` (the other
/// ops in graph order, op #i into phases[phaseOf(i)], where phaseOf never
/// decreases), and the stream set-up and join that go around the phases
/// (`prologue`, `epilogue`; empty on one stream).
struct GraphCode {
  Phase init;
  std::vector<Phase> phases;
  std::ostringstream prologue, epilogue;
};

/// The code of one device of a multi-device step: its constants and one
/// function body per stream.
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

  /// Declarations of the views of `used`, in graph order (inputs, params,
  /// op results), for the top of a function body.
  std::string views(const std::set<const Value*>& used) {
    std::ostringstream out;
    auto declare = [&](const Value* v) {
      if (!used.count(v))
        return;
      const auto& [region, offset] = where_.at(v);
      out << "  const TensorView " << names_(v) << " = at(" << region << ", " << offset << ", "
          << dtypeEnum(v->type().dtype) << ", " << ints(v->type().shape) << "); // "
          << v->type().str() << "\n";
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

  llvm::Error write(GraphCode& code, const std::function<size_t(size_t)>& phaseOf) {
    Schedule schedule = scheduleOf();
    if (schedule.multi)
      code.prologue << "  // The other streams start after what stream 0 launched before this "
                       "step.\n"
                    << "  if (!recordEvent(0))\n    return *failed = \"schedule\", false;\n";
    for (int64_t t : schedule.streams)
      code.prologue << "  if (!setStream(" << t << ") || !waitEvent(0) || !setStream(0))\n"
                    << "    return *failed = \"schedule\", false;\n";
    int64_t current = 0;
    size_t index = 0;
    for (const auto& opPtr : g_.ops()) {
      const Op& op = *opPtr;
      ++index;
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
      if (schedule.multi && op.kind() != OpKind::Constant) {
        int64_t s = op.annotations().stream.value_or(0);
        std::string sync;
        if (s != current)
          sync += "setStream(" + std::to_string(s) + ")";
        current = s;
        for (int64_t e : schedule.waits[&op])
          sync +=
              (sync.empty() ? "" : " || !") + std::string("waitEvent(") + std::to_string(e) + ")";
        if (!sync.empty())
          out << "  if (!" << sync << ")\n    return *failed = " << cString(label) << ", false;\n";
      }
      out << "  if (!" << *call << ")\n    return *failed = " << cString(label) << ", false;\n";
      if (auto it = schedule.records.find(&op); it != schedule.records.end())
        out << "  if (!recordEvent(" << it->second << "))\n    return *failed = " << cString(label)
            << ", false;\n";
      if (op.kind() != OpKind::Constant)
        out << "  if (b.mark)\n    b.mark(b.markContext, "
            << cString(std::string(op.mnemonic()) + " " + label) << ");\n";
    }
    if (schedule.multi) {
      code.epilogue << "  // Stream 0 waits for the other streams: the step ends there.\n";
      int64_t event = schedule.nextEvent;
      for (int64_t t : schedule.streams)
        code.epilogue << "  if (!setStream(" << t << ") || !recordEvent(" << event + t
                      << ") || !setStream(0) || !waitEvent(" << event + t
                      << "))\n    return *failed = \"schedule\", false;\n";
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

  /// One device's code in a multi-device step: its constants into
  /// `code.init`, the ops of its stream s in graph order into
  /// `code.streams[s]`, with the events that order its streams, numbered
  /// from `nextEvent` (which advances past them). Stream 0 records a start
  /// event that the other streams wait for first, and waits last for an
  /// event each other stream records at its end, so a step's streams start
  /// and end together. `commIds` numbers the communication ops.
  llvm::Error writeDevice(DeviceCode& code, int64_t device, const std::map<const Op*, int>& commIds,
                          int64_t& nextEvent) {
    std::vector<const Op*> ops;
    std::set<int64_t> streams = {0};
    for (const auto& op : g_.ops())
      if (op->kind() != OpKind::Constant && onDevice(*op, device)) {
        ops.push_back(op.get());
        streams.insert(op->annotations().stream.value_or(0));
      }
    const bool multi = streams.size() > 1;
    const int64_t start = multi ? nextEvent++ : -1;
    Schedule schedule = scheduleOf(ops, nextEvent);
    nextEvent = schedule.nextEvent;
    for (int64_t s : streams)
      code.streams[s];
    auto check = [](const std::string& call, const std::string& label) {
      return "  if (!" + call + ")\n    return *failed = " + cString(label) + ", false;\n";
    };
    if (multi)
      for (int64_t s : streams)
        code.streams[s].body
            << (s == 0 ? "\n  // The step's other streams on this device start here.\n"
                       : "\n  // Start once stream 0 has started the step.\n")
            << check((s == 0 ? "recordEvent(b, " : "waitEvent(b, ") + std::to_string(start) + ")",
                     "schedule");
    for (const auto& opPtr : g_.ops()) {
      const Op& op = *opPtr;
      if (!onDevice(op, device))
        continue;
      const int64_t stream = op.annotations().stream.value_or(0);
      Phase& phase = op.kind() == OpKind::Constant ? code.init : code.streams[stream];
      for (const Value* v : op.operands())
        if (where_.count(v))
          phase.used.insert(v);
      for (unsigned r = 0; r < op.numResults(); ++r)
        if (where_.count(op.result(r)))
          phase.used.insert(op.result(r));
      phase.hyper |= !hyperParams(op).empty();
      std::ostringstream& out = phase.body;
      out << "\n  // " << statement(op, names_) << "\n";
      auto call =
          op.info().isCommunication() ? commCallOf(op, device, commIds.at(&op)) : callOf(op);
      if (!call)
        return call.takeError();
      if (nothingToDo(out, op, *call))
        continue;
      std::string label = op.loc().name.empty() ? std::string(op.mnemonic()) : op.loc().name;
      for (int64_t e : schedule.waits[&op])
        out << check("waitEvent(b, " + std::to_string(e) + ")", label);
      out << check(*call, label);
      if (auto it = schedule.records.find(&op); it != schedule.records.end())
        out << check("recordEvent(b, " + std::to_string(it->second) + ")", label);
      if (op.kind() != OpKind::Constant)
        out << "  if (b.mark)\n    b.mark(b.markContext, "
            << cString(std::string(op.mnemonic()) + " " + label) << ");\n";
    }
    if (multi)
      for (int64_t s : streams) {
        if (s == 0)
          continue;
        int64_t end = nextEvent++;
        code.streams[s].body << "\n  // The end of this stream's step, which stream 0 waits for.\n"
                             << check("recordEvent(b, " + std::to_string(end) + ")", "schedule");
        code.streams[0].body << "\n  // The step ends when stream " << s << " has ended.\n"
                             << check("waitEvent(b, " + std::to_string(end) + ")", "schedule");
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
  /// The events that order an op after the ops of other streams it depends
  /// on: through a value it reads, or through planned bytes it reads or
  /// writes that an op of another stream wrote or read before (memory
  /// reuse). Waits already implied by an earlier wait are left out.
  struct Schedule {
    bool multi = false;
    std::vector<int64_t> streams; ///< the streams other than 0 in use
    std::map<const Op*, std::vector<int64_t>> waits;
    std::map<const Op*, int64_t> records; ///< event recorded after the op
    int64_t nextEvent = 1;
  };
  struct Access {
    std::string region;
    int64_t begin, end;
    bool write;
  };

  std::vector<Access> accessesOf(const Op& op) const {
    std::vector<Access> out;
    auto add = [&](const Value* v, bool write) {
      auto it = where_.find(v);
      if (it == where_.end())
        return; // another device's value (a communication op's other end)
      const auto& [region, offset] = it->second;
      out.push_back({region, offset, offset + v->type().sizeInBytes(), write});
    };
    for (unsigned i = 0; i < op.numOperands(); ++i)
      add(op.operand(i), op.kind() == OpKind::Assign && i == 0);
    for (unsigned r = 0; r < op.numResults(); ++r)
      add(op.result(r), true);
    return out;
  }

  Schedule scheduleOf() {
    std::vector<const Op*> ops;
    for (const auto& op : g_.ops())
      if (op->kind() != OpKind::Constant)
        ops.push_back(op.get());
    return scheduleOf(ops, 1);
  }

  /// The schedule of `ops` (one device's, in graph order), its events
  /// numbered from `firstEvent`.
  Schedule scheduleOf(const std::vector<const Op*>& ops, int64_t firstEvent) {
    Schedule s;
    s.nextEvent = firstEvent;
    std::set<int64_t> used;
    for (const Op* op : ops) {
      int64_t st = op->annotations().stream.value_or(0);
      if (st != 0)
        used.insert(st);
    }
    s.multi = !used.empty();
    s.streams.assign(used.begin(), used.end());
    if (!s.multi)
      return s;
    std::vector<std::vector<Access>> acc;
    for (const Op* op : ops)
      acc.push_back(accessesOf(*op));
    // waited[a][b]: the latest op of stream b that stream a has waited for.
    std::map<std::pair<int64_t, int64_t>, size_t> waited;
    std::map<size_t, int64_t> eventOf;
    for (size_t i = 0; i < ops.size(); ++i) {
      int64_t si = ops[i]->annotations().stream.value_or(0);
      std::map<int64_t, size_t> latest; // per other stream, the last conflicting op
      for (size_t j = 0; j < i; ++j) {
        int64_t sj = ops[j]->annotations().stream.value_or(0);
        if (sj == si)
          continue;
        bool conflict = false;
        for (const Access& a : acc[i])
          for (const Access& b : acc[j])
            conflict |=
                (a.write || b.write) && a.region == b.region && a.begin < b.end && b.begin < a.end;
        if (conflict)
          latest[sj] = j;
      }
      for (const auto& [sj, j] : latest) {
        auto key = std::make_pair(si, sj);
        auto w = waited.find(key);
        if (w != waited.end() && w->second >= j)
          continue;
        waited[key] = j;
        auto [it, added] = eventOf.emplace(j, s.nextEvent);
        if (added) {
          s.records[ops[j]] = s.nextEvent;
          ++s.nextEvent;
        }
        s.waits[ops[i]].push_back(it->second);
      }
    }
    return s;
  }

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
    for (unsigned r = 0; r < op.numResults(); ++r)
      args.push_back(names_(op.result(r)));
    std::string p = params();
    if (!p.empty())
      args.push_back(p);
    std::string call = fn + "(";
    for (size_t i = 0; i < args.size(); ++i)
      call += (i ? ", " : "") + args[i];
    return call + ")";
  }

  const Graph& g_;
  const Places& where_;
  Names names_;
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
