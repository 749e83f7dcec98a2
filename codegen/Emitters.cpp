//===- Emitters.cpp - The runtime call of each IR op ----------------------===//
#include "codegen/Emitters.h"

#include "ir/Printer.h"

#include <cmath>

namespace lwcc::codegen {

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

namespace {

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
std::string layerNormP(const Op& op) {
  return "LayerNormParams{" + std::to_string(op.getInt("axis")) + ", " +
         num(op.getFloat("epsilon")) + "}";
}
std::string gatherNdP(const Op& op) {
  return "GatherNdParams{" + std::to_string(op.getInt("batch_dims")) + "}";
}
std::string transposeP(const Op& op) { return "TransposeParams{" + ints(op.getInts("perm")) + "}"; }
std::string sliceP(const Op& op) {
  return "SliceParams{" + ints(op.getInts("starts")) + ", " + ints(op.getInts("ends")) + ", " +
         optInts(op, "axes") + ", " + optInts(op, "steps") + "}";
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

} // namespace

std::string splitP(const Op& op) {
  return "SplitParams{" + std::to_string(op.getInt("axis")) + ", " + ints(op.getInts("split")) +
         "}";
}

std::string concatP(const Op& op) {
  return "ConcatParams{" + std::to_string(op.getInt("axis")) + "}";
}

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
      {OpKind::LayerNorm, {"layerNorm", Args::Plain, layerNormP}},
      {OpKind::LayerNormGrad, {"layerNormGrad", Args::Plain, layerNormP}},
      {OpKind::Erf, {"erf", Args::Plain, none}},
      {OpKind::GatherNd, {"gatherNd", Args::Plain, gatherNdP}},
      {OpKind::GatherNdGrad, {"gatherNdGrad", Args::Plain, gatherNdP}},
  };
  return table;
}

/// The parameter struct of an op whose settings come from the trainer's
/// flags at run time; "" for the others.
std::string hyperParams(const Op& op) {
  switch (op.kind()) {
  case OpKind::SgdUpdate:
    return "SgdParams{h.momentum, h.weightDecay, h.nesterov}";
  case OpKind::AdamUpdate:
    return "AdamParams{h.beta1, h.beta2, h.epsilon, h.weightDecay, h.decoupled}";
  case OpKind::LrSchedule:
    return "LrScheduleParams{static_cast<LrScheduleKind>(h.schedule), h.lr, h.warmupSteps, "
           "h.totalSteps, h.stepSize, h.gamma, h.minLr}";
  default:
    return "";
  }
}

} // namespace lwcc::codegen
