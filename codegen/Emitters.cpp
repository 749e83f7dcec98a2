//===- Emitters.cpp - The runtime call of each IR op ----------------------===//
#include "codegen/Emitters.h"

#include "ir/Printer.h"
#include "runtime/include/lwrt/activation_math.h"
#include "runtime/include/lwrt/language_math.h"
#include "runtime/include/lwrt/resize_math.h"

#include <cmath>
#include <iterator>

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

std::string sliceRowsP(const Op& op, int64_t shift) {
  return "SliceParams{" + ints({op.getInts("starts")[0] - shift}) + ", " +
         ints({op.getInts("ends")[0] - shift}) + ", " + optInts(op, "axes") + ", " +
         optInts(op, "steps") + "}";
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
/// ActivationParams{alpha, beta, gamma}: the attributes an activation has.
std::string activationP(const Op& op) {
  auto at = [&](const char* n) { return op.info().findAttr(n) ? num(op.getFloat(n)) : "0.0"; };
  return "ActivationParams{" + at("alpha") + ", " + at("beta") + ", " + at("gamma") + "}";
}
/// ResizeParams of resize and resize_grad; enumerators in the order of
/// lwrt/resize_math.h's name tables.
std::string resizeP(const Op& op) {
  auto pick = [&](const char* attr, const auto& names, const char* type, const auto& ids) {
    for (size_t k = 0; k < std::size(names); ++k)
      if (op.getString(attr) == names[k])
        return std::string(type) + "::" + ids[k];
    return std::string(type) + "::" + ids[0]; // the verifier rejects other names
  };
  static const char* modes[] = {"Nearest", "Linear", "Cubic"};
  static const char* coords[] = {"HalfPixel",  "PytorchHalfPixel", "AlignCorners",
                                 "Asymmetric", "TfHalfPixelForNn", "HalfPixelSymmetric"};
  static const char* nearests[] = {"RoundPreferFloor", "RoundPreferCeil", "Floor", "Ceil",
                                   "Simple"};
  auto piece = [&](const char* name) {
    return op.hasAttr(name) ? ints(op.getInts(name)) : std::string("{}");
  };
  return "ResizeParams{" + floats(op.getFloats("scales")) + ", " +
         pick("mode", lwrt::kResizeModeNames, "ResizeMode", modes) + ", " +
         pick("coordinate_transformation_mode", lwrt::kResizeCoordNames, "ResizeCoord", coords) +
         ", " + pick("nearest_mode", lwrt::kResizeNearestNames, "ResizeNearest", nearests) + ", " +
         num(op.getFloat("cubic_coeff_a")) + ", " + std::to_string(op.getInt("exclude_outside")) +
         ", " + piece("whole_in") + ", " + piece("in_offsets") + ", " + piece("whole_out") + ", " +
         piece("out_offsets") + "}";
}
/// CompareParams{CompareKind::...}; kinds in the order of kCompareKindNames.
std::string compareP(const Op& op) {
  static const char* ids[] = {
      "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal", "And", "Or", "Xor"};
  for (size_t k = 0; k < std::size(ids); ++k)
    if (op.getString("kind") == lwrt::kCompareKindNames[k])
      return std::string("CompareParams{CompareKind::") + ids[k] + "}";
  return "CompareParams{}"; // the verifier rejects other kinds
}
std::string clipP(const Op& op) {
  return "ClipParams{" + num(op.getFloat("min")) + ", " + num(op.getFloat("max")) + "}";
}
std::string reduceP(const Op& op) {
  return "ReduceParams{" + optInts(op, "axes") + ", " + std::to_string(op.getInt("keepdims")) + "}";
}
std::string cumSumP(const Op& op) {
  return "CumSumParams{" + std::to_string(op.getInt("axis")) + ", " +
         std::to_string(op.getInt("exclusive")) + ", " + std::to_string(op.getInt("reverse")) + "}";
}
std::string tileP(const Op& op) { return "TileParams{" + ints(op.getInts("repeats")) + "}"; }
std::string modP(const Op& op) { return "ModParams{" + std::to_string(op.getInt("fmod")) + "}"; }
std::string softmaxP(const Op& op) {
  return "SoftmaxParams{" + std::to_string(op.getInt("axis")) + "}";
}
/// An ignore_index: kNoIgnoreIndex when none is set (INT64_MIN has no literal).
std::string ignoreIndex(const Op& op) {
  int64_t v = op.getInt("ignore_index");
  return v == lwrt::kNoIgnoreIndex ? std::string("kNoIgnoreIndex") : std::to_string(v);
}
std::string xentP(const Op& op) {
  return "XentParams{" + num(op.getFloat("label_smoothing")) + ", " + ignoreIndex(op) + "}";
}
/// gather_elements and scatter_elements: the axis counted from the front.
std::string elementsAxis(const Op& op) {
  int64_t axis = op.getInt("axis");
  return std::to_string(axis < 0 ? axis + op.operand(0)->type().rank() : axis);
}
std::string gatherElementsP(const Op& op) {
  return "GatherElementsParams{" + elementsAxis(op) + "}";
}
std::string scatterElementsP(const Op& op) {
  return "ScatterElementsParams{" + elementsAxis(op) + ", " +
         std::string(op.getString("reduction") == "add" ? "1" : "0") + "}";
}
/// NllLossParams{NllReduction::..., ignore_index}; reductions in the order
/// of kNllReductionNames.
std::string nllP(const Op& op) {
  static const char* ids[] = {"None", "Sum", "Mean"};
  std::string r = ids[2];
  for (size_t k = 0; k < std::size(ids); ++k)
    if (op.getString("reduction") == lwrt::kNllReductionNames[k])
      r = ids[k];
  return "NllLossParams{NllReduction::" + r + ", " + ignoreIndex(op) + "}";
}
/// AttentionParams{scale, causal} of attention and attention_grad.
std::string attentionP(const Op& op) {
  return "AttentionParams{" + num(op.getFloat("scale")) + ", " +
         std::to_string(op.getInt("causal")) + "}";
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
  std::string p =
      "DropoutMaskParams{" + num(op.getFloat("ratio")) + ", " + std::to_string(op.getInt("seed"));
  if (op.hasAttr("whole_shape"))
    p += ", " + ints(op.getInts("whole_shape")) + ", " + ints(op.getInts("offsets"));
  return p + "}";
}
/// An update op's weight decay: its parameter group's, else the optimizer's.
double decayOf(const Op& op) {
  return op.getFloat("group_decay") >= 0 ? op.getFloat("group_decay") : op.getFloat("weight_decay");
}
std::string sgdP(const Op& op) {
  return "SgdParams{" + num(op.getFloat("momentum")) + ", " + num(decayOf(op)) + ", " +
         std::to_string(op.getInt("nesterov")) + ", " + num(op.getFloat("lr_scale")) + "}";
}
std::string adamP(const Op& op) {
  return "AdamParams{" + num(op.getFloat("beta1")) + ", " + num(op.getFloat("beta2")) + ", " +
         num(op.getFloat("epsilon")) + ", " + num(decayOf(op)) + ", " +
         std::to_string(op.getInt("decoupled")) + ", " + num(op.getFloat("lr_scale")) + "}";
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

const std::map<OpKind, ParamsFn>& paramsFormatters() {
  static const std::map<OpKind, ParamsFn> table = {
      {OpKind::Concat, concatP},
      {OpKind::Split, splitP},
      {OpKind::Conv2d, conv},
      {OpKind::Conv2dGradInput, conv},
      {OpKind::Conv2dGradFilter, conv},
      {OpKind::MaxPool2d, maxPool},
      {OpKind::MaxPool2dGrad, maxPool},
      {OpKind::AvgPool2d, avgPool},
      {OpKind::AvgPool2dGrad, avgPool},
      {OpKind::GlobalAvgPool, none},
      {OpKind::Lrn, lrnP},
      {OpKind::LrnGrad, lrnP},
      {OpKind::Relu, none},
      {OpKind::LeakyRelu, leaky},
      {OpKind::Sigmoid, none},
      {OpKind::Tanh, none},
      {OpKind::Exp, none},
      {OpKind::Log, none},
      {OpKind::Sqrt, none},
      {OpKind::Reciprocal, none},
      {OpKind::Neg, none},
      {OpKind::Abs, none},
      {OpKind::Sign, none},
      {OpKind::Clip, clipP},
      {OpKind::Add, none},
      {OpKind::Sub, none},
      {OpKind::Mul, none},
      {OpKind::Div, none},
      {OpKind::Pow, none},
      {OpKind::ReduceMean, reduceP},
      {OpKind::ReduceSum, reduceP},
      {OpKind::Gemm, gemmP},
      {OpKind::MatMul, none},
      {OpKind::Reshape, none},
      {OpKind::Flatten, none},
      {OpKind::Identity, none},
      {OpKind::Dropout, none},
      {OpKind::Transpose, transposeP},
      {OpKind::Slice, sliceP},
      {OpKind::SliceGrad, sliceP},
      {OpKind::Gather, gatherP},
      {OpKind::GatherGrad, gatherP},
      {OpKind::Expand, none},
      {OpKind::Pad, padP},
      {OpKind::Cast, none},
      {OpKind::Softmax, softmaxP},
      {OpKind::LogSoftmax, softmaxP},
      {OpKind::SoftmaxGrad, softmaxP},
      {OpKind::LogSoftmaxGrad, softmaxP},
      {OpKind::BatchNorm, bnP},
      {OpKind::BatchNormTrain, bnTrainP},
      {OpKind::BatchNormGrad, bnTrainP},
      {OpKind::SoftmaxXent, xentP},
      {OpKind::SoftmaxXentGrad, xentP},
      {OpKind::MseLoss, none},
      {OpKind::MseLossGrad, none},
      {OpKind::ReluGrad, none},
      {OpKind::LeakyReluGrad, leaky},
      {OpKind::SigmoidGrad, none},
      {OpKind::TanhGrad, none},
      {OpKind::ClipGrad, clipP},
      {OpKind::DropoutMask, dropoutP},
      {OpKind::SgdUpdate, sgdP},
      {OpKind::AdamUpdate, adamP},
      {OpKind::LrSchedule, lrP},
      {OpKind::AllFinite, [](const Op&) { return std::string("AllFiniteParams{}"); }},
      {OpKind::SquareSum, [](const Op&) { return std::string("SquareSumParams{}"); }},
      {OpKind::ClipCoef,
       [](const Op& op) { return "ClipCoefParams{" + num(op.getFloat("max_norm")) + "}"; }},
      {OpKind::LayerNorm, layerNormP},
      {OpKind::LayerNormGrad, layerNormP},
      {OpKind::Erf, none},
      {OpKind::GatherNd, gatherNdP},
      {OpKind::GatherNdGrad, gatherNdP},
      {OpKind::HardSwish, activationP},
      {OpKind::HardSwishGrad, activationP},
      {OpKind::HardSigmoid, activationP},
      {OpKind::HardSigmoidGrad, activationP},
      {OpKind::Mish, activationP},
      {OpKind::MishGrad, activationP},
      {OpKind::Softplus, activationP},
      {OpKind::SoftplusGrad, activationP},
      {OpKind::Softsign, activationP},
      {OpKind::SoftsignGrad, activationP},
      {OpKind::Elu, activationP},
      {OpKind::EluGrad, activationP},
      {OpKind::Selu, activationP},
      {OpKind::SeluGrad, activationP},
      {OpKind::Celu, activationP},
      {OpKind::CeluGrad, activationP},
      {OpKind::ThresholdedRelu, activationP},
      {OpKind::ThresholdedReluGrad, activationP},
      {OpKind::PRelu, none},
      {OpKind::PReluGrad, none},
      {OpKind::Max, none},
      {OpKind::Min, none},
      {OpKind::MaxGrad, none},
      {OpKind::MinGrad, none},
      {OpKind::Compare, compareP},
      {OpKind::Where, none},
      {OpKind::Resize, resizeP},
      {OpKind::ResizeGrad, resizeP},
      {OpKind::CumSum, cumSumP},
      {OpKind::Tile, tileP},
      {OpKind::Mod, modP},
      {OpKind::Sin, none},
      {OpKind::Cos, none},
      {OpKind::ReduceL1, reduceP},
      {OpKind::ReduceL2, reduceP},
      {OpKind::ReduceSumSquare, reduceP},
      {OpKind::GatherElements, gatherElementsP},
      {OpKind::ScatterElements, scatterElementsP},
      {OpKind::NllLoss, nllP},
      {OpKind::NllLossGrad, nllP},
      {OpKind::Attention, attentionP},
      {OpKind::AttentionGrad, attentionP},
  };
  return table;
}

/// The parameter struct of an op whose settings come from the trainer's
/// flags at run time; "" for the others.
std::string hyperParams(const Op& op) {
  // A parameter group's own weight decay is compiled in; the others take
  // the trainer's --weight-decay.
  auto decay = [&] {
    return op.getFloat("group_decay") >= 0 ? num(op.getFloat("group_decay"))
                                           : std::string("h.weightDecay");
  };
  switch (op.kind()) {
  case OpKind::SgdUpdate:
    return "SgdParams{h.momentum, " + decay() + ", h.nesterov, " + num(op.getFloat("lr_scale")) +
           "}";
  case OpKind::AdamUpdate:
    return "AdamParams{h.beta1, h.beta2, h.epsilon, " + decay() + ", h.decoupled, " +
           num(op.getFloat("lr_scale")) + "}";
  case OpKind::LrSchedule:
    return "LrScheduleParams{static_cast<LrScheduleKind>(h.schedule), h.lr, h.warmupSteps, "
           "h.totalSteps, h.stepSize, h.gamma, h.minLr}";
  case OpKind::SoftmaxXent:
  case OpKind::SoftmaxXentGrad:
    return "XentParams{h.labelSmoothing, " + ignoreIndex(op) + "}";
  case OpKind::ClipCoef:
    return "ClipCoefParams{h.clipGradNorm}";
  default:
    return "";
  }
}

} // namespace lwcc::codegen
