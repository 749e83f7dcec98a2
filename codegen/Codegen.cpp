//===- Codegen.cpp - Planned training graph -> CPU trainer source ---------===//
//
// 1. Give every value a C++ view: inputs in the input buffer, params (and
//    optimizer state) in the state buffer, op results at their @buf offset
//    in the arena. Offsets become named constants.
// 2. Emit init() with the constants and step() with one runtime call per op
//    in graph order, each under a comment with the IR statement, using the
//    op's row of the emitter table below.
// 3. Emit the ModelInfo that the runtime's trainerMain runs, and the state
//    blob (initial params; zero-initialized state stays zero).
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"

#include "codegen/Emitters.h"
#include "ir/Printer.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace lwcc {

namespace {

using namespace codegen;

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

std::string cString(const std::string& s) { return quoteString(s); }

/// The IR statement of `op`, as a one-line comment (values by C name).
std::string statement(const Op& op, Names& names) {
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

llvm::Expected<HyperDefaults> hyperDefaults(const Graph& g) {
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
      if (call->empty()) {
        if (op.kind() == OpKind::Assign)
          out << "  // (" << names_(op.operand(1)) << " was written in place over "
              << names_(op.operand(0)) << ": nothing to copy)\n";
        else
          out << "  // (a view of " << names_(op.operand(0)) << ": same bytes, nothing to do)\n";
        continue;
      }
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
      const auto& [region, offset] = where_.at(v);
      out.push_back({region, offset, offset + v->type().sizeInBytes(), write});
    };
    for (unsigned i = 0; i < op.numOperands(); ++i)
      add(op.operand(i), op.kind() == OpKind::Assign && i == 0);
    for (unsigned r = 0; r < op.numResults(); ++r)
      add(op.result(r), true);
    return out;
  }

  Schedule scheduleOf() {
    Schedule s;
    std::vector<const Op*> ops;
    std::set<int64_t> used;
    for (const auto& op : g_.ops())
      if (op->kind() != OpKind::Constant) {
        ops.push_back(op.get());
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
    if (op.kind() == OpKind::Constant) {
      std::vector<double> fv;
      std::vector<int64_t> iv;
      if (op.hasAttr("value"))
        fv = op.getFloats("value");
      if (op.hasAttr("ivalue"))
        iv = op.getInts("ivalue");
      return "fill(" + names_(op.result()) + ", FillParams{" + floats(fv) + ", " + ints(iv) + "})";
    }
    if (op.kind() == OpKind::Assign) {
      // An update written over its param leaves nothing to copy.
      if (where_.at(op.operand(0)) == where_.at(op.operand(1)))
        return std::string();
      return "copy(" + names_(op.operand(1)) + ", " + names_(op.operand(0)) + ")";
    }
    if (op.kind() == OpKind::Concat) {
      std::vector<const Value*> xs(op.operands().begin(), op.operands().end());
      return "concat(" + list(xs) + ", " + names_(op.result()) + ", " + concatP(op) + ")";
    }
    if (op.kind() == OpKind::Split) {
      std::vector<const Value*> rs;
      for (unsigned r = 0; r < op.numResults(); ++r)
        rs.push_back(op.result(r));
      return "split(" + names_(op.operand(0)) + ", " + list(rs) + ", " + splitP(op) + ")";
    }
    auto it = emitters().find(op.kind());
    if (it == emitters().end())
      return op.emitError("codegen: no runtime kernel for this op");
    const Emitter& e = it->second;
    // A view whose result shares its operand's bytes needs no copy.
    if (std::strcmp(e.fn, "copy") == 0 && where_.at(op.operand(0)) == where_.at(op.result()))
      return std::string();
    std::vector<std::string> args;
    unsigned fixed = op.info().minOperands;
    for (unsigned i = 0; i < op.numOperands(); ++i)
      args.push_back((e.args == Args::OptionalLast && i >= fixed ? "&" : "") +
                     names_(op.operand(i)));
    if (e.args == Args::OptionalLast && op.numOperands() == fixed)
      args.push_back("nullptr");
    for (unsigned r = 0; r < op.numResults(); ++r)
      args.push_back(names_(op.result(r)));
    std::string params = hyperParams(op);
    if (params.empty())
      params = e.params(op);
    if (!params.empty())
      args.push_back(params);
    std::string call = std::string(e.fn) + "(";
    for (size_t i = 0; i < args.size(); ++i)
      call += (i ? ", " : "") + args[i];
    return call + ")";
  }

  const Graph& g_;
  const Places& where_;
  Names names_;
};

/// Places the results of a planned graph at their @buf offsets in `region`;
/// returns the arena's size.
llvm::Expected<int64_t> placeResults(const Graph& g, Places& where, const std::string& region,
                                     int64_t* classes) {
  int64_t arenaBytes = 0;
  for (const auto& op : g.ops()) {
    if (op->annotations().device.value_or(0) != 0)
      return op->emitError("codegen: the trainer runs one device; this op is on device " +
                           std::to_string(*op->annotations().device));
    if (op->numResults() && !op->annotations().bufferOffsets)
      return op->emitError("codegen: has no @buf; run memory-plan first");
    for (unsigned r = 0; r < op->numResults(); ++r) {
      int64_t off = (*op->annotations().bufferOffsets)[r];
      if (off == -1) {
        // Written over the param it updates (the memory plan's kOverParam):
        // the result's only use is that param's assign.
        const Value* v = op->result(r);
        const Op* user = v->uses().size() == 1 ? v->uses().front().user : nullptr;
        if (!user || user->kind() != OpKind::Assign || !where.count(user->operand(0)))
          return op->emitError("codegen: @buf(-1) on a result that is not assigned to a param");
        where[v] = where.at(user->operand(0));
        continue;
      }
      where[op->result(r)] = {region, off};
      arenaBytes = std::max(arenaBytes, alignUp(off + op->result(r)->type().sizeInBytes()));
    }
    if (classes && op->kind() == OpKind::SoftmaxXent)
      *classes = op->operand(0)->type().shape[1];
  }
  return arenaBytes;
}

/// An assembler string literal for a file name.
std::string asmString(const std::string& s) {
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
std::string incbin(const std::string& symbol, const std::string& file) {
  std::ostringstream os;
  os << "asm(\".section .rodata\\n.balign 64\\n.globl " << symbol << "_begin\\n"
     << symbol << "_begin:\\n.incbin \\\"" << asmString(file) << "\\\"\\n.globl " << symbol
     << "_end\\n"
     << symbol << "_end:\\n.byte 0\\n.previous\\n\");\n";
  return os.str();
}

std::string incbinSymbols(const std::string& symbol) {
  return "extern \"C\" const unsigned char " + symbol + "_begin[], " + symbol + "_end[];\n";
}

} // namespace

llvm::Expected<GeneratedTrainer> generateTrainer(const Module& m, const CodegenOptions& o) {
  const Graph& g = *m.graph;
  if (o.target != "cpu" && o.target != "cuda")
    return makeError("codegen: unknown target '" + o.target + "'");
  const bool cuda = o.target == "cuda";
  if (g.outputs().empty() || g.outputs()[0]->type().rank() != 0 ||
      !isFloat(g.outputs()[0]->type().dtype))
    return makeError("codegen: graph @" + g.name() + " has no scalar loss as output #0");
  const Value* loss = g.outputs()[0];
  if (!loss->definingOp())
    return makeError("codegen: the loss must be computed by an op");

  // Inputs and state: contiguous, aligned; op results at their planned offsets.
  Places where;
  int64_t inputBytes = 0, stateBytes = 0, classes = 0;
  std::map<std::string, int64_t> inputAt, paramAt;
  for (const auto& in : g.inputs()) {
    where[in.get()] = {"b.inputs", inputBytes};
    inputAt[in->name()] = inputBytes;
    inputBytes = alignUp(inputBytes + in->type().sizeInBytes());
  }
  for (const auto& p : g.params()) {
    where[p.get()] = {"b.state", stateBytes};
    paramAt[p->paramName()] = stateBytes;
    stateBytes = alignUp(stateBytes + p->type().sizeInBytes());
  }
  auto arenaBytes = placeResults(g, where, "b.arena", &classes);
  if (!arenaBytes)
    return arenaBytes.takeError();
  auto hyper = hyperDefaults(g);
  if (!hyper)
    return hyper.takeError();

  // The evaluation graph reads the train step's inputs and params by name.
  Places evalWhere;
  int64_t evalArenaBytes = 0;
  const Value* logits = nullptr;
  if (o.eval) {
    const Graph& e = *o.eval;
    for (const auto& in : e.inputs()) {
      auto it = inputAt.find(in->name());
      if (it == inputAt.end())
        return makeError("codegen: the evaluation graph's input '%" + in->name() +
                         "' is not an input of the training step");
      evalWhere[in.get()] = {"b.inputs", it->second};
    }
    for (const auto& p : e.params()) {
      auto it = paramAt.find(p->paramName());
      if (it == paramAt.end())
        return makeError("codegen: the evaluation graph's param '" + p->paramName() +
                         "' is not a param of the training step");
      evalWhere[p.get()] = {"b.state", it->second};
    }
    auto bytes = placeResults(e, evalWhere, "b.arena", nullptr);
    if (!bytes)
      return bytes.takeError();
    evalArenaBytes = *bytes;
    if (e.outputs().empty() || !e.outputs()[0]->definingOp())
      return makeError("codegen: the evaluation graph computes no output");
    logits = e.outputs()[0];
  }

  std::ostringstream os;
  const char* ns = cuda ? "cuda" : "cpu";
  os << "// Trainer for " << o.modelName << ", generated by lwcc. Do not edit: regenerate.\n"
     << "//\n"
     << "// The training step of @" << g.name() << " (" << g.numOps()
     << " ops) in three phases, forward (with the loss),\n"
     << "// backward and update, as one call per IR op on the " << (cuda ? "CUDA" : "CPU")
     << " runtime. Every op result lives at\n"
     << "// its planned offset in one arena; params and optimizer state live in the\n"
     << "// state buffer, initialized from the weights embedded below.\n"
     << "#include <limits>\n#include <optional>\n#include <string>\n#include <vector>\n\n"
     << "#include \"lwrt/" << ns << "_nn.h\"\n#include \"lwrt/" << ns << "_tensor.h\"\n"
     << "#include \"lwrt/trainer.h\"\n"
     << (cuda ? "#include \"lwrt/nvtx.h\"\n" : "") << "\n";
  // The assembler embeds the blobs (nvcc's device pass must not see them).
  if (o.embedWeights || !o.exportTemplate.empty())
    os << (cuda ? "#if !defined(__CUDA_ARCH__)\n" : "")
       << (o.embedWeights ? incbin("lwcc_weights", o.weightsFile) : "")
       << (o.exportTemplate.empty() ? "" : incbin("lwcc_export", o.exportFile))
       << (cuda ? "#endif\n" : "") << (o.embedWeights ? incbinSymbols("lwcc_weights") : "")
       << (o.exportTemplate.empty() ? "" : incbinSymbols("lwcc_export")) << "\n";
  os << "namespace {\n\nusing namespace lwrt;\nusing namespace lwrt::" << ns << ";\n\n"
     << "[[maybe_unused]] constexpr double kInf = std::numeric_limits<double>::infinity();\n\n"
     << llvm::formatv("constexpr int64_t kArenaBytes = {0};\n", *arenaBytes).str()
     << llvm::formatv("constexpr int64_t kStateBytes = {0};\n", stateBytes).str()
     << llvm::formatv("constexpr int64_t kInputBytes = {0};\n", inputBytes).str()
     << llvm::formatv("constexpr int64_t kEvalArenaBytes = {0};\n\n", evalArenaBytes).str()
     << "TensorView at(unsigned char* base, int64_t offset, DType t, std::vector<int64_t> shape) "
        "{\n  return TensorView{base + offset, t, std::move(shape)};\n}\n\n";

  // `range`: the NVTX range of the function in a CUDA trainer ("": none,
  // for the one-time set-up).
  auto function = [&](const char* name, const char* range, const std::string& comment,
                      PhaseWriter& w, const Phase& phase, const std::string& before = "",
                      const std::string& after = "") {
    os << "// " << comment << "\nbool " << name
       << "(const StepBuffers& b, [[maybe_unused]] std::string* failed) {\n"
       << w.views(phase.used);
    if (cuda && *range)
      os << "  PhaseRange range(" << quoteString(range) << ");\n";
    if (phase.hyper)
      os << "  const Hyper& h = *b.hyper;\n";
    os << before << phase.body.str() << after << "  return true;\n}\n\n";
  };
  {
    // The step's phases are contiguous in graph order (the memory plan
    // assumes that order): forward up to the loss, the optimizer's trailing
    // ops (location "optimizer...") as the update, the backward between.
    std::vector<const Op*> ops;
    for (const auto& op : g.ops())
      ops.push_back(op.get());
    size_t lossAt = 0, updateFrom = ops.size();
    while (lossAt < ops.size() && ops[lossAt] != loss->definingOp())
      ++lossAt;
    auto isUpdate = [](const Op* op) {
      return op->kind() == OpKind::Constant ||
             llvm::StringRef(op->loc().name).startswith("optimizer");
    };
    while (updateFrom > lossAt + 1 && isUpdate(ops[updateFrom - 1]))
      --updateFrom;
    GraphCode code;
    PhaseWriter w(g, where);
    if (llvm::Error e = w.write(code, [&](size_t i) -> size_t {
          return i <= lossAt ? 0 : i < updateFrom ? 1 : 2;
        }))
      return e;
    code.phases.resize(3);
    function("init", "", "The training step's constants, written once.", w, code.init);
    function("forwardPhase", "forward", "Forward: the model and the loss.", w, code.phases[0]);
    function("backwardPhase", "backward", "Backward: the gradients of every param.", w,
             code.phases[1]);
    function("updatePhase", "update", "Update: the optimizer's step on every param.", w,
             code.phases[2]);
    os << "// One training step: forward, backward, update.\n"
       << "bool step(const StepBuffers& b, std::string* failed) {\n"
       << code.prologue.str()
       << "  if (!forwardPhase(b, failed) || !backwardPhase(b, failed) || !updatePhase(b, "
          "failed))\n    return false;\n"
       << code.epilogue.str() << "  return true;\n}\n\n";
  }
  if (o.eval) {
    GraphCode code;
    PhaseWriter w(*o.eval, evalWhere);
    if (llvm::Error e = w.write(code, [](size_t) -> size_t { return 0; }))
      return e;
    code.phases.resize(1);
    function("evalInit", "", "The evaluation pass's constants, written once.", w, code.init);
    function("eval", "eval", "Evaluation: the inference graph on the input batch.", w,
             code.phases[0], code.prologue.str(), code.epilogue.str());
  }
  os << "} // namespace\n\n";

  // The model description the runtime's main loop needs.
  int64_t weightsBytes = 0;
  for (const auto& p : g.params())
    if (!p->zeroInit())
      weightsBytes += p->type().sizeInBytes();
  uint64_t fingerprint = 0xcbf29ce484222325ull;
  auto hash = [&](const std::string& s) {
    for (unsigned char c : s + '\n')
      fingerprint = (fingerprint ^ c) * 0x100000001b3ull;
  };
  hash(g.name());
  for (const auto& in : g.inputs())
    hash(in->name() + ":" + in->type().str());
  for (const auto& p : g.params())
    hash(p->paramName() + ":" + p->type().str());
  os << "int main(int argc, char** argv) {\n  ModelInfo model;\n"
     << "  model.name = " << cString(o.modelName) << ";\n"
     << "  model.target = \"" << o.target << "\";\n"
     << "  model.fingerprint = " << fingerprint << "ull;\n";
  for (const auto& in : g.inputs())
    os << "  model.inputs.push_back({" << cString(in->name()) << ", " << dtypeEnum(in->type().dtype)
       << ", " << ints(in->type().shape) << ", "
       << (in->role() == InputRole::Label ? "true" : "false") << ", " << where.at(in.get()).second
       << "});\n";
  for (const auto& p : g.params())
    os << "  model.params.push_back({" << cString(p->paramName()) << ", "
       << dtypeEnum(p->type().dtype) << ", " << ints(p->type().shape) << ", "
       << where.at(p.get()).second << ", " << (p->zeroInit() ? "true" : "false") << "});\n";
  for (const Value* out : g.outputs()) {
    const auto& [region, offset] = where.at(out);
    if (region != "b.arena")
      return makeError("codegen: output '%" + out->name() + "' is not computed by the step");
    os << "  model.outputs.push_back({" << cString(out->name()) << ", "
       << dtypeEnum(out->type().dtype) << ", " << ints(out->type().shape) << ", " << offset
       << "});\n";
  }
  os << "  model.arenaBytes = kArenaBytes;\n  model.stateBytes = kStateBytes;\n"
     << "  model.inputBytes = kInputBytes;\n"
     << "  model.classes = " << classes << ";\n"
     << "  model.lossOffset = " << where.at(loss).second << ";\n"
     << "  model.lossType = " << dtypeEnum(loss->type().dtype) << ";\n"
     << "  model.defaults.family = " << hyper->family << ";\n"
     << hyper->fields << "  model.tf32 = " << (o.tf32 ? "true" : "false") << ";\n"
     << "  model.init = init;\n  model.step = step;\n";
  if (o.eval)
    os << "  model.evalInit = evalInit;\n  model.eval = eval;\n"
       << "  model.evalArenaBytes = kEvalArenaBytes;\n"
       << "  model.logitsOffset = " << evalWhere.at(logits).second << ";\n"
       << "  model.logitsShape = " << ints(logits->type().shape) << ";\n"
       << "  model.logitsType = " << dtypeEnum(logits->type().dtype) << ";\n";
  if (o.embedWeights)
    os << "  model.weights = lwcc_weights_begin;\n"
       << "  model.weightsBytes = lwcc_weights_end - lwcc_weights_begin;\n";
  else
    os << "  model.weights = nullptr; // read from <program>.weights\n"
       << "  model.weightsBytes = " << weightsBytes << ";\n";
  if (!o.exportTemplate.empty()) {
    os << "  model.exportTemplate = lwcc_export_begin;\n"
       << "  model.exportTemplateBytes = lwcc_export_end - lwcc_export_begin;\n";
    for (const ExportCutSpec& c : o.exportCuts)
      os << "  model.exportCuts.push_back({" << c.offset << "u, " << c.param << "u, " << c.bytes
         << "u}); // " << g.params()[c.param]->paramName() << "\n";
  }
  os << "  return trainerMain(argc, argv, model, " << ns << "::createRunner);\n}\n";

  // The weights blob: the initial params that are not zero-initialized, packed.
  GeneratedTrainer out;
  out.fileName = cuda ? "trainer.cu" : "trainer.cc";
  out.source = os.str();
  out.exportTemplate = o.exportTemplate;
  for (const auto& p : g.params()) {
    if (p->zeroInit())
      continue;
    auto it = m.weights.find(p->paramName());
    if (it == m.weights.end())
      return makeError(p->loc(), "codegen: no initial value for param '%" + p->name() + "'");
    const Tensor& t = it->second;
    size_t at = out.weights.size();
    out.weights.resize(at + static_cast<size_t>(p->type().sizeInBytes()));
    char* dst = out.weights.data() + at;
    for (int64_t k = 0; k < t.size(); ++k) {
      switch (t.type.dtype) {
      case DType::F32: {
        float v = static_cast<float>(t.f[k]);
        std::memcpy(dst + 4 * k, &v, 4);
        break;
      }
      case DType::F64:
        std::memcpy(dst + 8 * k, &t.f[k], 8);
        break;
      case DType::I64:
        std::memcpy(dst + 8 * k, &t.i[k], 8);
        break;
      case DType::I32: {
        int32_t v = static_cast<int32_t>(t.i[k]);
        std::memcpy(dst + 4 * k, &v, 4);
        break;
      }
      case DType::Bool:
        dst[k] = t.i[k] != 0;
        break;
      default:
        return makeError(p->loc(), "codegen: param '%" + p->name() + "' is " + t.type.str() +
                                       ", which the trainer does not hold");
      }
    }
  }
  return out;
}

} // namespace lwcc
