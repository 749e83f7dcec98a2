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

#include "ir/Printer.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

namespace lwcc {

namespace {

constexpr int64_t kAlign = 256;
int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string dtypeEnum(DType t) {
  switch (t) {
  case DType::F32:
    return "DType::F32";
  case DType::F64:
    return "DType::F64";
  case DType::F16:
    return "DType::F16";
  case DType::BF16:
    return "DType::BF16";
  case DType::I64:
    return "DType::I64";
  case DType::I32:
    return "DType::I32";
  case DType::Bool:
    return "DType::Bool";
  }
  return "";
}

std::string num(double v) {
  if (std::isinf(v))
    return v < 0 ? "-kInf" : "kInf";
  return formatFloat(v);
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

std::string floats(const std::vector<double>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + num(v[i]);
  return s + "}";
}

std::string optInts(const Op& op, const char* name) {
  return op.hasAttr(name) ? "std::vector<int64_t>" + ints(op.getInts(name)) : "std::nullopt";
}

/// How an op's arguments are laid out in its runtime call.
enum class Args {
  Plain,       ///< operands, then results
  OptionalLast ///< like Plain, but the last operand is a pointer (null when absent)
};

/// The runtime function, argument layout and parameter struct of an op.
struct Emitter {
  const char* fn;
  Args args;
  std::string (*params)(const Op&);
};

std::string none(const Op&) { return ""; }
std::string conv(const Op& op) {
  return "Conv2dParams{" + ints(op.getInts("strides")) + ", " + ints(op.getInts("pads")) + ", " +
         ints(op.getInts("dilations")) + ", " + std::to_string(op.getInt("group")) + "}";
}
std::string maxPool(const Op& op) {
  return "MaxPool2dParams{" + ints(op.getInts("kernel")) + ", " + ints(op.getInts("strides")) +
         ", " + ints(op.getInts("pads")) + ", " + ints(op.getInts("dilations")) + ", " +
         std::to_string(op.getInt("ceil_mode")) + "}";
}
std::string avgPool(const Op& op) {
  return "AvgPool2dParams{" + ints(op.getInts("kernel")) + ", " + ints(op.getInts("strides")) +
         ", " + ints(op.getInts("pads")) + ", " + std::to_string(op.getInt("ceil_mode")) + ", " +
         std::to_string(op.getInt("count_include_pad")) + "}";
}
std::string lrnP(const Op& op) {
  return "LrnParams{" + std::to_string(op.getInt("size")) + ", " + num(op.getFloat("alpha")) +
         ", " + num(op.getFloat("beta")) + ", " + num(op.getFloat("bias")) + "}";
}
std::string gemmP(const Op& op) {
  return "GemmParams{" + std::to_string(op.getInt("transA")) + ", " +
         std::to_string(op.getInt("transB")) + ", " + num(op.getFloat("alpha")) + ", " +
         num(op.getFloat("beta")) + "}";
}
std::string leaky(const Op& op) { return "LeakyReluParams{" + num(op.getFloat("alpha")) + "}"; }
std::string clipP(const Op& op) {
  return "ClipParams{" + num(op.getFloat("min")) + ", " + num(op.getFloat("max")) + "}";
}
std::string reduceP(const Op& op) {
  return "ReduceParams{" + optInts(op, "axes") + ", " + std::to_string(op.getInt("keepdims")) + "}";
}
std::string softmaxP(const Op& op) {
  return "SoftmaxParams{" + std::to_string(op.getInt("axis")) + "}";
}
std::string bnP(const Op& op) {
  return "BatchNormParams{" + num(op.getFloat("epsilon")) + ", " + num(op.getFloat("momentum")) +
         "}";
}
std::string bnTrainP(const Op& op) {
  return "BatchNormTrainParams{" + num(op.getFloat("epsilon")) + "}";
}
std::string transposeP(const Op& op) { return "TransposeParams{" + ints(op.getInts("perm")) + "}"; }
std::string concatP(const Op& op) {
  return "ConcatParams{" + std::to_string(op.getInt("axis")) + "}";
}
std::string sliceP(const Op& op) {
  return "SliceParams{" + ints(op.getInts("starts")) + ", " + ints(op.getInts("ends")) + ", " +
         optInts(op, "axes") + ", " + optInts(op, "steps") + "}";
}
std::string splitP(const Op& op) {
  return "SplitParams{" + std::to_string(op.getInt("axis")) + ", " + ints(op.getInts("split")) +
         "}";
}
std::string gatherP(const Op& op) {
  return "GatherParams{" + std::to_string(op.getInt("axis")) + "}";
}
std::string padP(const Op& op) {
  const std::string& m = op.getString("mode");
  std::string mode = m == "reflect" ? "PadMode::Reflect"
                     : m == "edge"  ? "PadMode::Edge"
                                    : "PadMode::Constant";
  return "PadParams{" + ints(op.getInts("pads")) + ", " + mode + ", " + num(op.getFloat("value")) +
         "}";
}
std::string dropoutP(const Op& op) {
  return "DropoutMaskParams{" + num(op.getFloat("ratio")) + ", " +
         std::to_string(op.getInt("seed")) + "}";
}
std::string sgdP(const Op& op) {
  return "SgdParams{" + num(op.getFloat("momentum")) + ", " + num(op.getFloat("weight_decay")) +
         ", " + std::to_string(op.getInt("nesterov")) + "}";
}
std::string adamP(const Op& op) {
  return "AdamParams{" + num(op.getFloat("beta1")) + ", " + num(op.getFloat("beta2")) + ", " +
         num(op.getFloat("epsilon")) + ", " + num(op.getFloat("weight_decay")) + ", " +
         std::to_string(op.getInt("decoupled")) + "}";
}
std::string lrP(const Op& op) {
  const std::string& k = op.getString("kind");
  std::string kind = k == "step"     ? "LrScheduleKind::Step"
                     : k == "cosine" ? "LrScheduleKind::Cosine"
                                     : "LrScheduleKind::Constant";
  return "LrScheduleParams{" + kind + ", " + num(op.getFloat("base_lr")) + ", " +
         std::to_string(op.getInt("warmup_steps")) + ", " +
         std::to_string(op.getInt("total_steps")) + ", " + std::to_string(op.getInt("step_size")) +
         ", " + num(op.getFloat("gamma")) + ", " + num(op.getFloat("min_lr")) + "}";
}

/// The emitter of each op kind; Concat, Split, Constant and Assign are
/// written by hand below (lists of views, init-time fill, state copy).
const std::map<OpKind, Emitter>& emitters() {
  static const std::map<OpKind, Emitter> table = {
      {OpKind::Conv2d, {"conv2d", Args::OptionalLast, conv}},
      {OpKind::Conv2dGradInput, {"conv2dGradInput", Args::Plain, conv}},
      {OpKind::Conv2dGradFilter, {"conv2dGradFilter", Args::Plain, conv}},
      {OpKind::MaxPool2d, {"maxPool2d", Args::Plain, maxPool}},
      {OpKind::MaxPool2dGrad, {"maxPool2dGrad", Args::Plain, maxPool}},
      {OpKind::AvgPool2d, {"avgPool2d", Args::Plain, avgPool}},
      {OpKind::AvgPool2dGrad, {"avgPool2dGrad", Args::Plain, avgPool}},
      {OpKind::GlobalAvgPool, {"globalAvgPool", Args::Plain, none}},
      {OpKind::Lrn, {"lrn", Args::Plain, lrnP}},
      {OpKind::LrnGrad, {"lrnGrad", Args::Plain, lrnP}},
      {OpKind::Relu, {"relu", Args::Plain, none}},
      {OpKind::LeakyRelu, {"leakyRelu", Args::Plain, leaky}},
      {OpKind::Sigmoid, {"sigmoid", Args::Plain, none}},
      {OpKind::Tanh, {"tanh", Args::Plain, none}},
      {OpKind::Exp, {"exp", Args::Plain, none}},
      {OpKind::Log, {"log", Args::Plain, none}},
      {OpKind::Sqrt, {"sqrt", Args::Plain, none}},
      {OpKind::Reciprocal, {"reciprocal", Args::Plain, none}},
      {OpKind::Neg, {"neg", Args::Plain, none}},
      {OpKind::Abs, {"abs", Args::Plain, none}},
      {OpKind::Sign, {"sign", Args::Plain, none}},
      {OpKind::Clip, {"clip", Args::Plain, clipP}},
      {OpKind::Add, {"add", Args::Plain, none}},
      {OpKind::Sub, {"sub", Args::Plain, none}},
      {OpKind::Mul, {"mul", Args::Plain, none}},
      {OpKind::Div, {"div", Args::Plain, none}},
      {OpKind::Pow, {"pow", Args::Plain, none}},
      {OpKind::ReduceMean, {"reduceMean", Args::Plain, reduceP}},
      {OpKind::ReduceSum, {"reduceSum", Args::Plain, reduceP}},
      {OpKind::Gemm, {"gemm", Args::OptionalLast, gemmP}},
      {OpKind::MatMul, {"matmul", Args::Plain, none}},
      {OpKind::Reshape, {"copy", Args::Plain, none}},
      {OpKind::Flatten, {"copy", Args::Plain, none}},
      {OpKind::Identity, {"copy", Args::Plain, none}},
      {OpKind::Dropout, {"copy", Args::Plain, none}},
      {OpKind::Transpose, {"transpose", Args::Plain, transposeP}},
      {OpKind::Slice, {"slice", Args::Plain, sliceP}},
      {OpKind::SliceGrad, {"sliceGrad", Args::Plain, sliceP}},
      {OpKind::Gather, {"gather", Args::Plain, gatherP}},
      {OpKind::GatherGrad, {"gatherGrad", Args::Plain, gatherP}},
      {OpKind::Expand, {"expand", Args::Plain, none}},
      {OpKind::Pad, {"pad", Args::Plain, padP}},
      {OpKind::Cast, {"cast", Args::Plain, none}},
      {OpKind::Softmax, {"softmax", Args::Plain, softmaxP}},
      {OpKind::LogSoftmax, {"logSoftmax", Args::Plain, softmaxP}},
      {OpKind::SoftmaxGrad, {"softmaxGrad", Args::Plain, softmaxP}},
      {OpKind::LogSoftmaxGrad, {"logSoftmaxGrad", Args::Plain, softmaxP}},
      {OpKind::BatchNorm, {"batchNorm", Args::Plain, bnP}},
      {OpKind::BatchNormTrain, {"batchNormTrain", Args::Plain, bnTrainP}},
      {OpKind::BatchNormGrad, {"batchNormGrad", Args::Plain, bnTrainP}},
      {OpKind::SoftmaxXent, {"softmaxXent", Args::Plain, none}},
      {OpKind::SoftmaxXentGrad, {"softmaxXentGrad", Args::Plain, none}},
      {OpKind::MseLoss, {"mseLoss", Args::Plain, none}},
      {OpKind::MseLossGrad, {"mseLossGrad", Args::Plain, none}},
      {OpKind::ReluGrad, {"reluGrad", Args::Plain, none}},
      {OpKind::LeakyReluGrad, {"leakyReluGrad", Args::Plain, leaky}},
      {OpKind::SigmoidGrad, {"sigmoidGrad", Args::Plain, none}},
      {OpKind::TanhGrad, {"tanhGrad", Args::Plain, none}},
      {OpKind::ClipGrad, {"clipGrad", Args::Plain, clipP}},
      {OpKind::DropoutMask, {"dropoutMask", Args::Plain, dropoutP}},
      {OpKind::SgdUpdate, {"sgdUpdate", Args::Plain, sgdP}},
      {OpKind::AdamUpdate, {"adamUpdate", Args::Plain, adamP}},
      {OpKind::LrSchedule, {"lrSchedule", Args::Plain, lrP}},
  };
  return table;
}

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

} // namespace

llvm::Expected<GeneratedTrainer> generateCpuTrainer(const Module& m, const std::string& modelName) {
  const Graph& g = *m.graph;
  if (g.outputs().empty() || g.outputs()[0]->type().rank() != 0 ||
      !isFloat(g.outputs()[0]->type().dtype))
    return makeError("codegen: graph @" + g.name() + " has no scalar loss as output #0");
  const Value* loss = g.outputs()[0];
  if (!loss->definingOp())
    return makeError("codegen: the loss must be computed by an op");
  Names names;
  std::ostringstream os;
  std::map<const Value*, std::pair<std::string, int64_t>> where; // region, offset

  // Inputs and state: contiguous, aligned.
  int64_t inputBytes = 0, stateBytes = 0, arenaBytes = 0;
  for (const auto& in : g.inputs()) {
    where[in.get()] = {"b.inputs", inputBytes};
    inputBytes = alignUp(inputBytes + in->type().sizeInBytes());
  }
  for (const auto& p : g.params()) {
    where[p.get()] = {"b.state", stateBytes};
    stateBytes = alignUp(stateBytes + p->type().sizeInBytes());
  }
  int64_t classes = 0;
  for (const auto& op : g.ops()) {
    if (op->annotations().device.value_or(0) != 0)
      return op->emitError("codegen: the CPU trainer runs one device; this op is on device " +
                           std::to_string(*op->annotations().device));
    if (op->numResults() && !op->annotations().bufferOffsets)
      return op->emitError("codegen: has no @buf; run memory-plan first");
    for (unsigned r = 0; r < op->numResults(); ++r) {
      int64_t off = (*op->annotations().bufferOffsets)[r];
      where[op->result(r)] = {"b.arena", off};
      arenaBytes = std::max(arenaBytes, alignUp(off + op->result(r)->type().sizeInBytes()));
    }
    if (op->kind() == OpKind::SoftmaxXent)
      classes = op->operand(0)->type().shape[1];
  }

  os << "// Trainer for " << modelName << ", generated by lwcc. Do not edit: regenerate.\n"
     << "//\n"
     << "// The training step of @" << g.name() << " (" << g.numOps()
     << " ops): forward, loss, backward and\n"
     << "// update as one call per IR op on the CPU runtime. Every op result lives at\n"
     << "// its planned offset in one arena; params and optimizer state live in the\n"
     << "// state buffer, initialized from the weights file lwcc wrote.\n"
     << "#include <limits>\n#include <optional>\n#include <string>\n#include <vector>\n\n"
     << "#include \"lwrt/cpu_nn.h\"\n#include \"lwrt/cpu_tensor.h\"\n#include "
        "\"lwrt/trainer.h\"\n\n"
     << "namespace {\n\nusing namespace lwrt;\nusing namespace lwrt::cpu;\n\n"
     << "constexpr double kInf = std::numeric_limits<double>::infinity();\n\n"
     << llvm::formatv("constexpr int64_t kArenaBytes = {0};\n", arenaBytes).str()
     << llvm::formatv("constexpr int64_t kStateBytes = {0};\n", stateBytes).str()
     << llvm::formatv("constexpr int64_t kInputBytes = {0};\n\n", inputBytes).str()
     << "TensorView at(unsigned char* base, int64_t offset, DType t, std::vector<int64_t> shape) "
        "{\n  return TensorView{base + offset, t, std::move(shape)};\n}\n\n";

  // Views of every value, built once per call from the buffers.
  auto declareViews = [&](std::ostringstream& out) {
    auto declare = [&](const Value* v) {
      const auto& [region, offset] = where.at(v);
      out << "  const TensorView " << names(v) << " = at(" << region << ", " << offset << ", "
          << dtypeEnum(v->type().dtype) << ", " << ints(v->type().shape) << "); // "
          << v->type().str() << "\n";
    };
    for (const auto& in : g.inputs())
      declare(in.get());
    for (const auto& p : g.params())
      declare(p.get());
    for (const auto& op : g.ops())
      for (unsigned r = 0; r < op->numResults(); ++r)
        declare(op->result(r));
  };

  std::ostringstream init, step;
  for (const auto& opPtr : g.ops()) {
    const Op& op = *opPtr;
    std::ostringstream& out = op.kind() == OpKind::Constant ? init : step;
    out << "\n  // " << statement(op, names) << "\n";
    std::string call;
    auto views = [&](auto begin, auto end) {
      std::string s = "{";
      for (auto it = begin; it != end; ++it)
        s += (it == begin ? "" : ", ") + names(*it);
      return s + "}";
    };
    if (op.kind() == OpKind::Constant) {
      std::vector<double> fv;
      std::vector<int64_t> iv;
      if (op.hasAttr("value"))
        fv = op.getFloats("value");
      if (op.hasAttr("ivalue"))
        iv = op.getInts("ivalue");
      call = "fill(" + names(op.result()) + ", FillParams{" + floats(fv) + ", " + ints(iv) + "})";
    } else if (op.kind() == OpKind::Assign) {
      call = "copy(" + names(op.operand(1)) + ", " + names(op.operand(0)) + ")";
    } else if (op.kind() == OpKind::Concat) {
      call = "concat(" + views(op.operands().begin(), op.operands().end()) + ", " +
             names(op.result()) + ", " + concatP(op) + ")";
    } else if (op.kind() == OpKind::Split) {
      std::vector<const Value*> rs;
      for (unsigned r = 0; r < op.numResults(); ++r)
        rs.push_back(op.result(r));
      call = "split(" + names(op.operand(0)) + ", " + views(rs.begin(), rs.end()) + ", " +
             splitP(op) + ")";
    } else {
      auto it = emitters().find(op.kind());
      if (it == emitters().end())
        return op.emitError("codegen: no CPU kernel for this op");
      const Emitter& e = it->second;
      // A view whose result shares its operand's bytes needs no copy.
      if (std::strcmp(e.fn, "copy") == 0 && where.at(op.operand(0)) == where.at(op.result())) {
        out << "  // (a view of %" << op.operand(0)->name() << ": same bytes, nothing to do)\n";
        continue;
      }
      std::vector<std::string> args;
      unsigned fixed = op.info().minOperands;
      for (unsigned i = 0; i < op.numOperands(); ++i)
        args.push_back((e.args == Args::OptionalLast && i >= fixed ? "&" : "") +
                       names(op.operand(i)));
      if (e.args == Args::OptionalLast && op.numOperands() == fixed)
        args.push_back("nullptr");
      for (unsigned r = 0; r < op.numResults(); ++r)
        args.push_back(names(op.result(r)));
      std::string params = e.params(op);
      if (!params.empty())
        args.push_back(params);
      call = std::string(e.fn) + "(";
      for (size_t i = 0; i < args.size(); ++i)
        call += (i ? ", " : "") + args[i];
      call += ")";
    }
    std::string label = op.loc().name.empty() ? std::string(op.mnemonic()) : op.loc().name;
    out << "  if (!" << call << ")\n    return *failed = " << cString(label) << ", false;\n";
  }

  os << "bool init(const StepBuffers& b, std::string* failed) {\n";
  declareViews(os);
  os << init.str() << "  return true;\n}\n\n";
  os << "bool step(const StepBuffers& b, std::string* failed) {\n";
  declareViews(os);
  os << step.str() << "  return true;\n}\n\n} // namespace\n\n";

  // The model description the runtime's main loop needs.
  os << "int main(int argc, char** argv) {\n  ModelInfo model;\n"
     << "  model.name = " << cString(modelName) << ";\n";
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
     << "  model.init = init;\n  model.step = step;\n"
     << "  return trainerMain(argc, argv, model);\n}\n";

  // The state blob: initial params in their element types; state zeros.
  GeneratedTrainer out;
  out.source = os.str();
  out.weights.assign(static_cast<size_t>(stateBytes), '\0');
  for (const auto& p : g.params()) {
    if (p->zeroInit())
      continue;
    auto it = m.weights.find(p->paramName());
    if (it == m.weights.end())
      return makeError(p->loc(), "codegen: no initial value for param '%" + p->name() + "'");
    const Tensor& t = it->second;
    char* dst = out.weights.data() + where.at(p.get()).second;
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
                                       ", which the CPU trainer does not hold");
      }
    }
  }
  return out;
}

} // namespace lwcc
