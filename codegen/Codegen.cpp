//===- Codegen.cpp - Planned training graph -> trainer source -------------===//
//
// 1. Place every value: inputs in the input buffer, params (and optimizer
//    state) in the state buffer, op results at their @buf offsets in the
//    arena; with several devices (or streams), a state buffer and an arena
//    per device.
// 2. Write the step's functions with PhaseWriter: one device's step as
//    init() (its constant ops, once) and forward, backward and update
//    phases (one phase for micro-batches); several devices' as one function
//    per device and stream with the scheduled IR's events. Each runtime call
//    sits under the IR statement it computes; each function views the
//    values it uses by name (codegen/Names.h); a function of more than
//    kOpsPerFunction ops calls parts of at most that many. The evaluation
//    graph gets evalInit() and eval().
// 3. Write the constants those functions use (one per shape, one per
//    value's offset, in a block per buffer), then main(): the ModelInfo that
//    the runtime's trainerMain runs. The source is C++ for the CPU runtime
//    or CUDA C++ for the CUDA runtime, put into files by SourceFiles.cpp.
// 4. Pack the weights blob (SourceFiles.cpp: initial params;
//    zero-initialized state stays zero).
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"

#include "codegen/FusedKernels.h"
#include "codegen/Layouts.h"
#include "codegen/PhaseWriter.h"
#include "codegen/SourceFiles.h"
#include "ir/FusedOps.h"
#include "ir/Printer.h"
#include "runtime/include/lwrt/activation_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace lwcc {

using namespace codegen;

namespace {

/// The most ops one generated function holds: a longer phase or stream is
/// written as functions of at most this many ops, called in order (the
/// host compiler's time grows faster than linearly with a function's
/// length: resnet18's --gpus 4 --strategy=model CPU trainer, four streams of
/// about 620 ops, took g++ -O2 447 s of CPU as four functions, 59 s in parts).
constexpr size_t kOpsPerFunction = 64;

/// Where each device's values live in a multi-device step.
struct MultiDevicePlaces {
  int64_t devices = 0;
  std::vector<Places> where; ///< per device: the inputs, its params, its results
  std::vector<int64_t> arenaBytes, stateBytes;
};

int64_t deviceCount(const Graph& g) {
  int64_t n = 1;
  for (const auto& p : g.params())
    n = std::max(n, valueDevice(p.get()).value_or(0) + 1);
  for (const auto& op : g.ops())
    n = std::max(n, *devicesOf(*op).rbegin() + 1);
  return n;
}

/// Each device's state buffer (its params, in graph order) and arena (its
/// op results at their @buf offsets); `inputs` holds the inputs' places,
/// the same on every device.
llvm::Expected<MultiDevicePlaces> placeDevices(const Graph& g, const Places& inputs,
                                               int64_t* classes) {
  MultiDevicePlaces md;
  md.devices = deviceCount(g);
  md.where.assign(static_cast<size_t>(md.devices), inputs);
  md.arenaBytes.assign(static_cast<size_t>(md.devices), 0);
  md.stateBytes.assign(static_cast<size_t>(md.devices), 0);
  for (const auto& p : g.params()) {
    int64_t d = valueDevice(p.get()).value_or(0);
    int64_t& at = md.stateBytes[static_cast<size_t>(d)];
    md.where[static_cast<size_t>(d)][p.get()] = {"b.state", at};
    if (p->shard().size() > 1)
      return makeError(p->loc(), "codegen: param '%" + p->name() +
                                     "' is split along several dims, which trainers do not hold");
    at = alignUp(at + p->type().sizeInBytes());
  }
  for (int64_t d = 0; d < md.devices; ++d) {
    auto bytes = placeResults(g, md.where[static_cast<size_t>(d)], "b.arena", classes, d);
    if (!bytes)
      return bytes.takeError();
    md.arenaBytes[static_cast<size_t>(d)] = *bytes;
  }
  return md;
}

/// The ParamPlacement initializer of device param `p` (C++ source): its
/// logical param, device, offset (`offset`, C++ source) and shard.
std::string placementOf(const Value* p, int logical, const std::string& offset) {
  std::string shard = "-1, 0, 0";
  if (p->shard().size() == 1)
    shard = std::to_string(p->shard()[0].dim) + ", " + std::to_string(p->shard()[0].offset) + ", " +
            std::to_string(p->type().shape[static_cast<size_t>(p->shard()[0].dim)]);
  // Appended piece by piece: GCC 12's -O3 misreads `"{" + std::string`
  // (a -Wrestrict false positive).
  std::string placement(1, '{');
  placement += std::to_string(logical);
  placement += ", ";
  placement += std::to_string(valueDevice(p).value_or(0));
  placement += ", ";
  placement += offset;
  placement += ", ";
  placement += shard;
  placement += "}); // ";
  placement += p->paramName();
  placement += ' ';
  placement += p->type().str();
  return placement;
}

/// The samples of the data input each device reads (the rows of dim 0 its
/// slices take), or empty when some device reads it whole or not at all.
std::vector<int64_t> samplesPerDevice(const Graph& g, int64_t devices) {
  const Value* data = nullptr;
  for (const auto& in : g.inputs())
    if (in->role() == InputRole::Data && !data)
      data = in.get();
  if (!data)
    return {};
  std::vector<int64_t> rows(static_cast<size_t>(devices), -1);
  for (const Use& u : data->uses()) {
    const Op* op = u.user;
    if (!op)
      return {};
    size_t d = static_cast<size_t>(opDevice(*op));
    if (op->kind() != OpKind::Slice || !op->hasAttr("axes") ||
        op->getInts("axes") != std::vector<int64_t>{0})
      return {};
    int64_t n = op->result()->type().shape[0];
    if (rows[d] >= 0 && rows[d] != n)
      return {};
    rows[d] = n;
  }
  for (int64_t r : rows)
    if (r < 0)
      return {};
  return rows;
}

/// The include lines of the runtime headers beyond <ns>_nn.h and
/// <ns>_tensor.h that the ops of `g` and of the evaluation graph `eval`
/// (when there is one: its ops may differ, say the plain ops of an
/// attention the training step computes as one op) call into (activations,
/// resize, the position-encoding and norm ops, gradient clipping, and the
/// language-model ops).
std::string runtimeHeadersOf(const Graph& g, const Graph* eval, const char* ns) {
  static const std::set<OpKind> activationOps = [] {
    std::set<OpKind> ops = {OpKind::PRelu,   OpKind::PReluGrad, OpKind::Max,     OpKind::Min,
                            OpKind::MaxGrad, OpKind::MinGrad,   OpKind::Compare, OpKind::Where};
#define X(E, fn) ops.insert({OpKind::E, OpKind::E##Grad});
    LWRT_ACTIVATIONS(X)
#undef X
    return ops;
  }();
  static const std::set<OpKind> encodingOps = {
      OpKind::CumSum, OpKind::Tile,     OpKind::Mod,      OpKind::Sin,
      OpKind::Cos,    OpKind::ReduceL1, OpKind::ReduceL2, OpKind::ReduceSumSquare};
  static const std::set<OpKind> languageOps = {OpKind::GatherElements, OpKind::ScatterElements,
                                               OpKind::NllLoss, OpKind::NllLossGrad};
  bool activation = false, resize = false, encoding = false, clip = false, language = false,
       attention = false;
  std::vector<const Op*> ops;
  for (const Graph* graph : {&g, eval})
    if (graph)
      for (const auto& op : graph->ops())
        ops.push_back(op.get());
  for (const Op* op : ops) {
    activation |= activationOps.count(op->kind()) > 0;
    clip |= op->kind() == OpKind::SquareSum || op->kind() == OpKind::ClipCoef;
    resize |= op->kind() == OpKind::Resize || op->kind() == OpKind::ResizeGrad;
    encoding |= encodingOps.count(op->kind()) > 0;
    language |= languageOps.count(op->kind()) > 0;
    attention |= op->kind() == OpKind::Attention || op->kind() == OpKind::AttentionGrad;
  }
  std::string out;
  if (activation)
    out += std::string("#include \"lwrt/") + ns + "_activation.h\"\n";
  if (resize)
    out += std::string("#include \"lwrt/") + ns + "_resize.h\"\n";
  if (encoding)
    out += std::string("#include \"lwrt/") + ns + "_encoding.h\"\n";
  if (clip)
    out += std::string("#include \"lwrt/") + ns + "_grad_clip.h\"\n";
  if (language)
    out += std::string("#include \"lwrt/") + ns + "_language.h\"\n";
  if (attention)
    out += std::string("#include \"lwrt/") + ns + "_attention.h\"\n";
  return out;
}

/// Per device, the rows [begin, end) of dim 0 of the inputs it reads: the
/// rows of its dim-0 slices of them, all of them for any other read; {0, 0}
/// for a device that reads no input. Empty when a reader is not placed on
/// one of the devices. (A process under mpirun prepares only its devices'
/// rows of each batch.)
std::vector<std::pair<int64_t, int64_t>> inputRowsPerDevice(const Graph& g, int64_t devices) {
  std::vector<std::pair<int64_t, int64_t>> rows(static_cast<size_t>(devices), {0, 0});
  for (const auto& in : g.inputs()) {
    if (in->type().rank() == 0)
      continue;
    const int64_t n = in->type().shape[0];
    for (const Use& u : in->uses()) {
      if (!u.user)
        return {};
      const Op& op = *u.user;
      const int64_t d = operandDevice(op, u.index);
      if (d < 0 || d >= devices)
        return {};
      int64_t begin = 0, end = n;
      if (op.kind() == OpKind::Slice && op.hasAttr("axes") &&
          op.getInts("axes") == std::vector<int64_t>{0} && op.getInts("starts").size() == 1 &&
          op.getInts("ends").size() == 1 &&
          (!op.hasAttr("steps") || op.getInts("steps") == std::vector<int64_t>{1}) &&
          op.getInts("starts")[0] >= 0 && op.getInts("ends")[0] >= op.getInts("starts")[0]) {
        begin = std::min(op.getInts("starts")[0], n);
        end = std::min(op.getInts("ends")[0], n);
      }
      auto& r = rows[static_cast<size_t>(d)];
      r = r.first >= r.second ? std::make_pair(begin, end)
                              : std::make_pair(std::min(r.first, begin), std::max(r.second, end));
    }
  }
  return rows;
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
  // The logical params: one per initializer name, whole, in the order of
  // their first copy (on one device, every param).
  std::vector<const Value*> logical;
  std::map<std::string, int> logicalIndex;
  for (const auto& p : g.params())
    if (logicalIndex.emplace(p->paramName(), static_cast<int>(logical.size())).second) {
      logical.push_back(p.get());
      paramAt[p->paramName()] = stateBytes;
      stateBytes = alignUp(stateBytes + p->wholeType().sizeInBytes());
    }
  // Several devices, or several streams of one: one function per device and
  // stream, run together by the runtime's device group.
  bool multi = isMultiDevice(g);
  int64_t numEvents = 0;
  for (const auto& op : g.ops()) {
    multi |= op->annotations().stream.value_or(0) != 0 || op->info().isEvent();
    if (op->info().isEvent())
      numEvents = std::max(numEvents, op->getInt("event") + 1);
  }
  llvm::Expected<int64_t> arenaBytes = int64_t{0};
  MultiDevicePlaces md;
  if (multi) {
    auto placed = placeDevices(g, where, &classes);
    if (!placed)
      return placed.takeError();
    md = std::move(*placed);
  } else {
    for (const auto& p : g.params())
      where[p.get()] = {"b.state", paramAt.at(p->paramName())};
    arenaBytes = placeResults(g, where, "b.arena", &classes);
    if (!arenaBytes)
      return arenaBytes.takeError();
    // A view of a param read before the param is written: its bytes
    // (not with --no-fuse, whose step makes one call per op).
    if (o.fuseCalls)
      for (const Op* view : paramViews(g))
        where[view->result()] = where.at(view->operand(0));
  }
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

  // The functions first (they name the values and shapes), then the
  // constants they use, then main.
  const char* ns = cuda ? "cuda" : "cpu";
  std::set<std::string> offsetNames;
  ShapeNames shapes;
  Names names(offsetNames, "", multi && md.devices > 1);
  // The functions in order, each a unit the sources may be split at.
  std::vector<FunctionText> fns;
  // `range`: the NVTX range of the function in a CUDA trainer ("": none,
  // for the one-time set-up).
  auto function = [&](const std::string& name, const char* range, const std::string& comment,
                      PhaseWriter& w, const Phase& phase) {
    // The function `fn` of ops [begin, end), viewing what they use.
    auto write = [&](const std::string& fn, size_t begin, size_t end, const char* nvtx,
                     const std::string& doc) {
      std::set<const Value*> used;
      bool hyper = false;
      for (size_t k = begin; k < end; ++k) {
        used.insert(phase.ops[k].used.begin(), phase.ops[k].used.end());
        hyper |= phase.ops[k].hyper;
      }
      std::ostringstream text;
      text << "// " << doc << "\nbool " << fn
           << "(const StepBuffers& b, [[maybe_unused]] std::string* failed) {\n"
           << w.views(used);
      if (cuda && *nvtx)
        text << "  PhaseRange range(" << quoteString(nvtx) << ");\n";
      if (hyper)
        text << "  const Hyper& h = *b.hyper;\n";
      for (size_t k = begin; k < end; ++k)
        text << phase.ops[k].text;
      text << "  return true;\n}\n\n";
      fns.push_back({fn, text.str()});
    };
    const size_t n = phase.ops.size();
    if (n <= kOpsPerFunction) {
      write(name, 0, n, range, comment);
      return;
    }
    // A long one: parts of equal size, called in order.
    const size_t parts = (n + kOpsPerFunction - 1) / kOpsPerFunction;
    const size_t size = (n + parts - 1) / parts;
    for (size_t p = 0; p < parts; ++p)
      write(name + "_part" + std::to_string(p + 1), p * size, std::min(n, (p + 1) * size), "",
            "Part " + std::to_string(p + 1) + " of " + name + ".");
    std::ostringstream text;
    text << "// " << comment << "\n// Its ops in " << parts
         << " parts (short functions build faster).\n"
         << "bool " << name << "(const StepBuffers& b, std::string* failed) {\n";
    if (cuda && *range)
      text << "  PhaseRange range(" << quoteString(range) << ");\n";
    for (size_t p = 0; p < parts; ++p)
      text << "  if (!" << name << "_part" << p + 1 << "(b, failed))\n    return false;\n";
    text << "  return true;\n}\n\n";
    fns.push_back({name, text.str()});
  };
  // The fused ops' kernels, written into the source.
  auto fusedKernels = FusedKernels::render(g, cuda);
  if (!fusedKernels)
    return fusedKernels.takeError();
  // The activations CPU kernels keep in oneDNN's blocked layout.
  const std::set<const Value*> blocked = cuda ? std::set<const Value*>{} : blockedValues(g);
  // CUDA fuses what cuDNN's plans and the batch norm kernels apply.
  const PhaseWriter::Fusions fusions =
      cuda ? PhaseWriter::Fusions::Cuda : PhaseWriter::Fusions::All;
  int numComm = 0, streamsPerDevice = 1;
  std::vector<std::pair<int64_t, int64_t>> deviceSteps; // (device, stream)
  std::vector<std::unique_ptr<PhaseWriter>> writers;    // one per device
  // CUDA, several devices: per device, per input, the rows it holds.
  PackedInputs held;
  if (multi) {
    // One function per device and stream; the communication ops numbered
    // in graph order, the same on every device.
    std::map<const Op*, int> commIds;
    for (const auto& op : g.ops())
      if (op->info().isCommunication())
        commIds[op.get()] = numComm++;
    // A CUDA device holds only the rows of each input it reads, packed
    // (the CPU's devices read the host's batch where it is).
    if (cuda && md.devices > 1)
      held = packInputRows(g, md.devices, kAlign);
    for (int64_t d = 0; d < md.devices; ++d) {
      writers.push_back(
          std::make_unique<PhaseWriter>(g, md.where[static_cast<size_t>(d)], names, shapes));
      PhaseWriter& w = *writers.back();
      w.fuseActivations(fusions);
      w.setBlocked(blocked);
      w.setFusedKernels(&*fusedKernels);
      w.fuseCalls(o.fuseCalls);
      if (!held.rows.empty()) {
        std::map<const Value*, HeldRows> rows;
        for (size_t i = 0; i < g.inputs().size(); ++i)
          if (const HeldRows& r = held.rows[static_cast<size_t>(d)][i]; r.offset >= 0)
            rows[g.inputs()[i].get()] = r;
        w.setInputRows(std::move(rows));
      }
      DeviceCode code;
      if (llvm::Error e = w.writeDevice(code, d, commIds))
        return e;
      std::string dev = std::to_string(d);
      function("init_d" + dev, "",
               "Device " + dev + ": the training step's constants, written once.", w, code.init);
      for (auto& [stream, phase] : code.streams) {
        std::string name = "step_d" + dev + "_s" + std::to_string(stream);
        function(name, "step",
                 "Device " + dev + ", stream " + std::to_string(stream) +
                     ": its ops in graph order, ordered after the other streams' by the "
                     "scheduled IR's events.",
                 w, phase);
        deviceSteps.emplace_back(d, stream);
        streamsPerDevice = std::max(streamsPerDevice, static_cast<int>(stream) + 1);
      }
    }
  } else {
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
    writers.push_back(std::make_unique<PhaseWriter>(g, where, names, shapes));
    PhaseWriter& w = *writers.back();
    w.fuseActivations(fusions);
    w.setBlocked(blocked);
    w.setFusedKernels(&*fusedKernels);
    w.fuseCalls(o.fuseCalls);
    // Micro-batches (@mb) interleave forward and backward in the order
    // the schedule pass gave: one phase for them, then the update.
    bool micro = false;
    for (const Op* op : ops)
      micro |= op->annotations().microBatch.has_value();
    if (llvm::Error e = w.write(code, [&](size_t i) -> size_t {
          if (micro)
            return i < updateFrom ? 0 : 2;
          return i <= lossAt ? 0 : i < updateFrom ? 1 : 2;
        }))
      return e;
    code.phases.resize(3);
    function("init", "", "The training step's constants, written once.", w, code.init);
    if (micro) {
      function("microBatchesPhase", "microbatches",
               "Forward and backward of each micro-batch (@mb in the comments), in the "
               "schedule's order; gradients summed over them.",
               w, code.phases[0]);
    } else {
      function("forwardPhase", "forward", "Forward: the model and the loss.", w, code.phases[0]);
      function("backwardPhase", "backward", "Backward: the gradients of every param.", w,
               code.phases[1]);
    }
    function("updatePhase", "update", "Update: the optimizer's step on every param.", w,
             code.phases[2]);
    std::ostringstream text;
    text << "// One training step: " << (micro ? "micro-batches" : "forward, backward")
         << ", update.\n"
         << "bool step(const StepBuffers& b, std::string* failed) {\n"
         << (micro ? "  if (!microBatchesPhase(b, failed) || !updatePhase(b, failed))\n"
                   : "  if (!forwardPhase(b, failed) || !backwardPhase(b, failed) || "
                     "!updatePhase(b, failed))\n")
         << "    return false;\n"
         << "  return true;\n}\n\n";
    fns.push_back({"step", text.str()});
  }
  Names evalNames(offsetNames, "eval_", false);
  std::unique_ptr<PhaseWriter> evalWriter;
  if (o.eval) {
    GraphCode code;
    evalWriter = std::make_unique<PhaseWriter>(*o.eval, evalWhere, evalNames, shapes);
    PhaseWriter& w = *evalWriter;
    w.fuseActivations(fusions);
    if (!cuda)
      w.setBlocked(blockedValues(*o.eval));
    if (llvm::Error e = w.write(code, [](size_t) -> size_t { return 0; }))
      return e;
    code.phases.resize(1);
    function("evalInit", "", "The evaluation pass's constants, written once.", w, code.init);
    function("eval", "eval", "Evaluation: the inference graph on the input batch.", w,
             code.phases[0]);
  }

  // The offsets of the values the functions view, one block per buffer
  // (per device's buffer in a step of several devices).
  std::ostringstream offsets;
  std::set<const Value*> written, evalWritten;
  auto block = [&](const std::string& comment, const std::string& region, PhaseWriter& w) {
    std::string text = w.offsetConstants(region, written);
    if (!text.empty())
      offsets << "// " << comment << "\n" << text << "\n";
  };
  offsets << "// Where each value lives: its view's offset in the input batch (b.inputs),\n"
          << "// the state buffer (b.state: params, optimizer state, counters) or the\n"
          << "// arena (b.arena: op results at their planned offsets, sharing bytes where\n"
          << "// their lifetimes do not overlap).\n";
  if (multi) {
    std::string inputs;
    for (auto& w : writers)
      inputs += w->offsetConstants("b.inputs", written);
    if (!inputs.empty())
      offsets << "// The input batch, the same on every device.\n" << inputs << "\n";
    for (size_t d = 0; d < writers.size(); ++d) {
      block("Device " + std::to_string(d) + "'s state buffer.", "b.state", *writers[d]);
      block("Device " + std::to_string(d) + "'s arena.", "b.arena", *writers[d]);
    }
  } else {
    block("The input batch.", "b.inputs", *writers[0]);
    block("The state buffer.", "b.state", *writers[0]);
    block("The arena.", "b.arena", *writers[0]);
  }
  if (evalWriter) {
    // On one device the step's inputs and params are the logical ones:
    // evaluation names the training step's constants for them.
    std::map<std::pair<std::string, int64_t>, std::string> trained;
    if (!multi && !writers.empty())
      trained = writers[0]->leafConstants();
    std::string text;
    for (const char* region : {"b.inputs", "b.state", "b.arena"})
      text += evalWriter->offsetConstants(region, evalWritten, &trained);
    offsets << "// The evaluation pass: the input batch, the params in the state buffer\n"
            << "// (as the training step's logical params) and its own arena.\n"
            << text << "\n";
  }
  // A value's offset in main: its constant where a function viewed it.
  auto offsetOf = [&](const Value* v, int64_t offset) {
    return written.count(v) ? names.offset(v) : std::to_string(offset);
  };

  // The model description the runtime's main loop needs.
  std::ostringstream mainText;
  int64_t weightsBytes = 0;
  for (const Value* p : logical)
    if (!p->zeroInit())
      weightsBytes += p->wholeType().sizeInBytes();
  uint64_t fingerprint = 0xcbf29ce484222325ull;
  auto hash = [&](const std::string& s) {
    for (unsigned char c : s + '\n')
      fingerprint = (fingerprint ^ c) * 0x100000001b3ull;
  };
  hash(g.name());
  for (const auto& in : g.inputs())
    hash(in->name() + ":" + in->type().str());
  for (const Value* p : logical)
    hash(p->paramName() + ":" + p->wholeType().str());
  mainText << "int main(int argc, char** argv) {\n  ModelInfo model;\n"
           << "  model.name = " << cString(o.modelName) << ";\n"
           << "  model.target = \"" << o.target << "\";\n"
           << "  model.fingerprint = " << fingerprint << "ull;\n"
           << "  model.planHash = " << kPlanHashMark << ";\n";
  for (const auto& in : g.inputs())
    mainText << "  model.inputs.push_back({" << cString(in->name()) << ", "
             << dtypeEnum(in->type().dtype) << ", " << shapes(in->type().shape) << ", "
             << (in->role() == InputRole::Label ? "true" : "false") << ", "
             << offsetOf(in.get(), where.at(in.get()).second) << "});\n";
  for (size_t i = 0; i < logical.size(); ++i) {
    const Value* p = logical[i];
    // On one device the params are the logical ones, at their offsets.
    const int64_t at = paramAt.at(p->paramName());
    mainText << "  model.params.push_back({" << cString(p->paramName()) << ", "
             << dtypeEnum(p->type().dtype) << ", " << shapes(p->wholeType().shape) << ", "
             << (multi ? std::to_string(at) : offsetOf(p, at)) << ", "
             << (p->zeroInit() ? "true" : "false") << "});\n";
    if (p->paramName() == "loss_scale" && o.lossScaleInit > 0)
      mainText << "  model.lossScaleParam = " << i << ";\n"
               << "  model.lossScaleInit = " << num(o.lossScaleInit) << ";\n";
    if (p->paramName() == "grad_norm" && p->type().dtype == DType::F32)
      mainText << "  model.gradNormParam = " << i << ";\n";
  }
  auto placeOf = [&](const Value* v) -> const std::pair<std::string, int64_t>& {
    return multi ? md.where[static_cast<size_t>(valueDevice(v).value_or(0))].at(v) : where.at(v);
  };
  for (const Value* out : g.outputs()) {
    const auto& [region, offset] = placeOf(out);
    if (region != "b.arena")
      return makeError("codegen: output '%" + out->name() + "' is not computed by the step");
    mainText << "  model.outputs.push_back({" << cString(out->name()) << ", "
             << dtypeEnum(out->type().dtype) << ", " << shapes(out->type().shape) << ", "
             << offsetOf(out, offset);
    if (multi)
      mainText << ", " << valueDevice(out).value_or(0);
    mainText << "});\n";
  }
  mainText << "  model.arenaBytes = kArenaBytes;\n  model.stateBytes = kStateBytes;\n"
           << "  model.inputBytes = kInputBytes;\n"
           << "  model.classes = " << classes << ";\n"
           << (o.ignoreIndex ? "  model.hasIgnoreIndex = true;\n  model.ignoreIndex = " +
                                   std::to_string(*o.ignoreIndex) + ";\n"
                             : std::string())
           << (o.shiftLabels ? "  model.shiftLabels = true;\n" : "")
           << "  model.lossOffset = " << offsetOf(loss, placeOf(loss).second) << ";\n"
           << "  model.lossType = " << dtypeEnum(loss->type().dtype) << ";\n"
           << "  model.defaults.family = " << hyper->family << ";\n"
           << hyper->fields << "  model.tf32 = Tf32::" << o.tf32 << ";\n";
  if (o.target == "cuda" && !o.convWorkspaceBytes.empty())
    mainText << "  // The most workspace a convolution may take, per device: what the memory\n"
             << "  // plan left on the device spec.\n"
             << "  model.convWorkspaceBytes = " << ints(o.convWorkspaceBytes) << ";\n";
  if (!multi) {
    mainText << "  model.init = init;\n  model.step = step;\n";
  } else {
    mainText << "  // " << md.devices << " devices, each with its own arena and state buffer.\n"
             << "  model.numDevices = " << md.devices << ";\n"
             << "  model.streamsPerDevice = " << streamsPerDevice << ";\n"
             << "  model.deviceArenaBytes = " << ints(md.arenaBytes) << ";\n"
             << "  model.deviceStateBytes = " << ints(md.stateBytes) << ";\n";
    for (const auto& p : g.params())
      mainText << "  model.placements.push_back("
               << placementOf(p.get(), logicalIndex.at(p->paramName()),
                              offsetOf(p.get(), placeOf(p.get()).second))
               << "\n";
    mainText << "  model.deviceInit = {";
    for (int64_t d = 0; d < md.devices; ++d)
      mainText << (d ? ", " : "") << "init_d" << d;
    mainText << "};\n";
    for (const auto& [d, st] : deviceSteps)
      mainText << "  model.deviceSteps.push_back({" << d << ", " << st << ", step_d" << d << "_s"
               << st << ", \"step_d" << d << "_s" << st << "\"});\n";
    mainText << "  model.numCommOps = " << numComm << ";\n"
             << "  model.numEvents = " << numEvents << ";\n"
             << "  model.lossDevice = " << valueDevice(loss).value_or(0) << ";\n"
             << "  model.samplesPerDevice = " << ints(samplesPerDevice(g, md.devices)) << ";\n";
    mainText << "  model.inputRows = {";
    const auto rows = inputRowsPerDevice(g, md.devices);
    for (size_t d = 0; d < rows.size(); ++d)
      mainText << (d ? ", " : "") << "{" << rows[d].first << ", " << rows[d].second << "}";
    mainText << "};\n";
    if (!held.rows.empty()) {
      mainText << "  // Per device, per input: the rows [begin, end) of dim 0 it holds and\n"
               << "  // their offset in its input buffer (-1: none), and the buffer's bytes.\n"
               << "  model.deviceInputs = {";
      for (size_t d = 0; d < held.rows.size(); ++d) {
        mainText << (d ? ",\n      {" : "{");
        for (size_t i = 0; i < held.rows[d].size(); ++i) {
          const HeldRows& r = held.rows[d][i];
          mainText << (i ? ", " : "") << "{" << r.begin << ", " << r.end << ", " << r.offset << "}";
        }
        mainText << "}";
      }
      mainText << "};\n  model.deviceInputBytes = " << ints(held.bytes) << ";\n";
    }
  }
  if (o.eval)
    mainText << "  model.evalInit = evalInit;\n  model.eval = eval;\n"
             << "  model.evalArenaBytes = kEvalArenaBytes;\n"
             << "  model.logitsOffset = "
             << (evalWritten.count(logits) ? evalNames.offset(logits)
                                           : std::to_string(evalWhere.at(logits).second))
             << ";\n"
             << "  model.logitsShape = " << shapes(logits->type().shape) << ";\n"
             << "  model.logitsType = " << dtypeEnum(logits->type().dtype) << ";\n";
  if (o.embedWeights)
    mainText << "  model.weights = lwcc_weights_begin;\n"
             << "  model.weightsBytes = lwcc_weights_end - lwcc_weights_begin;\n";
  else
    mainText << "  model.weights = nullptr; // read from <program>.weights\n"
             << "  model.weightsBytes = " << weightsBytes << ";\n";
  if (!o.exportTemplate.empty()) {
    mainText << "  model.exportTemplate = lwcc_export_begin;\n"
             << "  model.exportTemplateBytes = lwcc_export_end - lwcc_export_begin;\n";
    for (const ExportCutSpec& c : o.exportCuts)
      mainText << "  model.exportCuts.push_back({" << c.offset << "u, " << c.param << "u, "
               << c.bytes << "u}); // " << logical.at(c.param)->paramName() << "\n";
  }
  mainText << "  return trainerMain(argc, argv, model, " << ns << "::createRunner"
           << (multi ? std::string(", ") + ns + "::createGroup" : std::string()) << ");\n}\n";

  // The top comment, the includes, the blobs, and what the functions share:
  // the sizes, `at`, the macros, the shapes and the offsets.
  SourceParts parts;
  std::ostringstream about;
  about << "// Trainer for " << o.modelName << ", generated by lwcc. Do not edit: regenerate.\n"
        << "//\n";
  if (multi)
    about << "// The training step of @" << g.name() << " (" << g.numOps() << " ops) on "
          << md.devices << " devices, as one function per device\n"
          << "// and stream (step_d<device>_s<stream>) that the " << (cuda ? "CUDA" : "CPU")
          << " runtime runs together, each op a call\n"
          << "// into the runtime; communication ops are one device's part of a collective,\n"
          << "// and the scheduled IR's events order a device's streams. Each device has\n"
          << "// its own arena (op results at their planned offsets) and state buffer (its\n"
          << "// params and their optimizer state, replicas or shards of the params\n"
          << "// embedded below).\n";
  else
    about << "// The training step of @" << g.name() << " (" << g.numOps()
          << " ops) in three phases, forward (with the loss),\n"
          << "// backward and update, as one call per IR op on the " << (cuda ? "CUDA" : "CPU")
          << " runtime. Every op result lives at\n"
          << "// its planned offset in one arena; params and optimizer state live in the\n"
          << "// state buffer, initialized from the weights embedded below.\n";
  parts.about = about.str();
  parts.includes =
      "#include <limits>\n#include <optional>\n#include <string>\n#include <vector>\n\n"
      "#include \"lwrt/" +
      std::string(ns) + "_nn.h\"\n#include \"lwrt/" + ns + "_tensor.h\"\n" +
      runtimeHeadersOf(g, o.eval, ns) +
      (fusedKernels->empty() ? "" : "#include \"lwrt/fused.h\"\n") +
      "#include \"lwrt/trainer.h\"\n" + (multi ? "#include \"lwrt/comm.h\"\n" : "") +
      (cuda ? "#include \"lwrt/nvtx.h\"\n" : "") + "\n";
  // The assembler embeds the blobs (nvcc's device pass must not see them).
  if (o.embedWeights || !o.exportTemplate.empty())
    parts.blobs = std::string(cuda ? "#if !defined(__CUDA_ARCH__)\n" : "") +
                  (o.embedWeights ? incbin("lwcc_weights", o.weightsFile) : "") +
                  (o.exportTemplate.empty() ? "" : incbin("lwcc_export", o.exportFile)) +
                  (cuda ? "#endif\n" : "") + (o.embedWeights ? incbinSymbols("lwcc_weights") : "") +
                  (o.exportTemplate.empty() ? "" : incbinSymbols("lwcc_export")) + "\n";
  const bool split = splitsSources(fns, o.opsPerFile);
  SharedSizes sizes{*arenaBytes, stateBytes, inputBytes, evalArenaBytes};
  parts.shared = sharedDefinitions(ns, sizes, shapes.definitions(split ? "inline " : ""),
                                   offsets.str(), split) +
                 fusedKernels->definitions();
  parts.main = mainText.str();

  GeneratedTrainer out;
  out.files = assembleSources(parts, fns, o.opsPerFile, o.modelName, cuda);
  out.exportTemplate = o.exportTemplate;
  auto weights = packWeights(logical, m.weights);
  if (!weights)
    return weights.takeError();
  out.weights = std::move(*weights);
  return out;
}

} // namespace lwcc
