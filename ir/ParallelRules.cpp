//===- ParallelRules.cpp - How ops compute shards of their results --------===//
//
// The parallel rules of ir/OpTraits.def. A rule answers: when result #0 of
// the op (operand #0 for ops with parOnOperand) is split along `dim` over
// some devices, which dim of each operand must be split the same way (or -1:
// the whole operand on every device), and which dim of each result is then
// split (or -1: whole, or a partial value to be summed). A rule returns
// nullopt for a dim it cannot split; materialize then runs the op whole.
//
//===----------------------------------------------------------------------===//
#include "ir/IR.h"

#include "llvm/ADT/StringRef.h"

namespace lwcc {

const Value* parSplitValue(const Op& op) {
  return op.info().parOnOperand && op.numOperands() ? op.operand(0) : op.result(0);
}

std::string parDimName(int64_t dim, int64_t rank) {
  if ((rank == 4 || rank == 2) && dim >= 0 && dim < rank)
    return std::string(1, "nchw"[dim]);
  std::string name(1, 'd'); // not `"d" + ...`: a GCC 12 -O3 -Wrestrict false positive
  name += std::to_string(dim);
  return name;
}

std::optional<int64_t> parDimIndex(const std::string& name, int64_t rank) {
  if (name.size() == 1 && (rank == 4 || rank == 2)) {
    auto pos = std::string("nchw").find(name[0]);
    if (pos != std::string::npos && static_cast<int64_t>(pos) < rank)
      return static_cast<int64_t>(pos);
  }
  if (name.size() >= 2 && name[0] == 'd' &&
      name.find_first_not_of("0123456789", 1) == std::string::npos) {
    int64_t d; // getAsInteger fails (true) on overflow, where std::stoll would throw
    if (!llvm::StringRef(name).substr(1).getAsInteger(10, d) && d < rank)
      return d;
  }
  return std::nullopt;
}

} // namespace lwcc

namespace lwcc::par {

namespace {

const Shape& shapeOf(const Value* v) { return v->type().shape; }

/// Operand `v` of an op whose result has shape `out`, split along `dim`:
/// the aligned dim of `v` under numpy broadcasting when it has the full
/// size there, or -1 when `v` is broadcast along it (needed whole).
int64_t alignedDim(const Value* v, const Shape& out, int64_t dim) {
  int64_t d = dim - static_cast<int64_t>(out.size() - shapeOf(v).size());
  if (d < 0 || shapeOf(v)[d] != out[dim] || out[dim] == 1)
    return -1;
  return d;
}

SplitPlan plan(std::vector<int64_t> operands, std::vector<int64_t> results,
               SplitPlan::Partial partial = SplitPlan::Partial::None) {
  return SplitPlan{std::move(operands), std::move(results), partial, {}};
}

bool validDim(const Value* v, int64_t dim) { return dim >= 0 && dim < v->type().rank(); }

} // namespace

std::optional<SplitPlan> elementwise(const Op& op, int64_t dim) {
  if (op.numResults() != 1 || !validDim(op.result(), dim))
    return std::nullopt;
  const Shape& out = shapeOf(op.result());
  if (out[dim] == 1)
    return std::nullopt;
  std::vector<int64_t> operands;
  for (Value* v : op.operands())
    operands.push_back(alignedDim(v, out, dim));
  return plan(std::move(operands), {dim});
}

namespace {

/// A sliding window along spatial dim `dim` (2: height, 3: width).
struct Window {
  int64_t kernel, stride, dilation, padBegin, extent; ///< extent: operand #0's size
};

Window windowOf(const Op& op, int64_t dim) {
  size_t k = static_cast<size_t>(dim - 2);
  Window w;
  w.kernel = op.kind() == OpKind::Conv2d ? shapeOf(op.operand(1))[static_cast<size_t>(dim)]
                                         : op.getInts("kernel")[k];
  w.stride = op.getInts("strides")[k];
  w.dilation = op.hasAttr("dilations") ? op.getInts("dilations")[k] : 1;
  w.padBegin = op.getInts("pads")[k];
  w.extent = shapeOf(op.operand(0))[static_cast<size_t>(dim)];
  return w;
}

/// A split of a sliding-window op's height or width: each device reads the
/// input rows its output rows cover (a halo beyond its share) and pads only
/// at the input's true borders (localizeWindow). Pools in ceil mode are not
/// split: their last window may hang over the padding.
std::optional<SplitPlan> windowed(const Op& op, int64_t dim, std::vector<int64_t> operands) {
  if (op.hasAttr("ceil_mode") && op.getInt("ceil_mode") != 0)
    return std::nullopt;
  Window w = windowOf(op, dim);
  operands[0] = dim;
  SplitPlan p = plan(std::move(operands), {dim});
  p.window = [w](int64_t begin, int64_t end) {
    int64_t first = begin * w.stride - w.padBegin;
    int64_t last = (end - 1) * w.stride - w.padBegin + (w.kernel - 1) * w.dilation + 1;
    return std::make_pair(std::max<int64_t>(0, first), std::min(w.extent, last));
  };
  return p;
}

} // namespace

std::optional<SplitPlan> conv2d(const Op& op, int64_t dim) {
  std::vector<int64_t> operands(op.numOperands(), -1);
  if (dim == 0) {
    operands[0] = 0; // samples; the filter and bias whole
    return plan(std::move(operands), {0});
  }
  if (dim == 2 || dim == 3)
    return windowed(op, dim, std::move(operands));
  if (dim != 1)
    return std::nullopt;
  int64_t group = op.getInt("group");
  int64_t cin = shapeOf(op.operand(0))[1], cout = shapeOf(op.result())[1];
  if (group == 1) {
    // Output channels: filter (and bias) rows, the whole input.
    operands[1] = 0;
  } else if (group == cin && group == cout) {
    // Depthwise: channel c reads input channel c only.
    operands[0] = 1;
    operands[1] = 0;
  } else {
    return std::nullopt;
  }
  if (op.numOperands() > 2)
    operands[2] = 0;
  return plan(std::move(operands), {1});
}

std::optional<SplitPlan> pool(const Op& op, int64_t dim) {
  if ((dim == 2 || dim == 3) && op.kind() != OpKind::GlobalAvgPool)
    return windowed(op, dim, {-1});
  if (dim != 0 && dim != 1)
    return std::nullopt;
  return plan({dim}, {dim});
}

void localizeWindow(Op& local, const Op& global, int64_t dim, int64_t offset) {
  // A depthwise convolution's channels split (conv2d's rule splits no other
  // grouped one): a group per channel of the shard.
  if (dim == 1 && global.kind() == OpKind::Conv2d && global.getInt("group") != 1)
    local.setAttr("group", Attribute(local.result()->type().shape[1]));
  if (dim != 2 && dim != 3)
    return;
  auto w = windowOf(global, dim);
  int64_t end = offset + local.result()->type().shape[static_cast<size_t>(dim)];
  int64_t first = offset * w.stride - w.padBegin;
  int64_t last = (end - 1) * w.stride - w.padBegin + (w.kernel - 1) * w.dilation + 1;
  std::vector<int64_t> pads = global.getInts("pads");
  pads[static_cast<size_t>(dim - 2)] = std::max<int64_t>(0, -first);
  pads[static_cast<size_t>(dim)] = std::max<int64_t>(0, last - w.extent);
  local.setAttr("pads", Attribute(pads));
}

std::optional<SplitPlan> sampleOnly(const Op& op, int64_t dim) {
  if (dim != 0)
    return std::nullopt;
  return plan(std::vector<int64_t>(op.numOperands(), 0), {0});
}

/// A batched matmul ([..., M, K] x [..., K, N], numpy's broadcasting over
/// the leading dims): a batch dim split in the operands that have it whole
/// (a weight [K, N] whole on every device), M in A's rows, N in B's columns.
std::optional<SplitPlan> batchedMatMul(const Op& op, int64_t dim) {
  const Value* y = op.result();
  const int64_t r = y->type().rank();
  const int64_t ra = op.operand(0)->type().rank(), rb = op.operand(1)->type().rank();
  if (ra < 2 || rb < 2 || !validDim(y, dim) || shapeOf(y)[dim] == 1)
    return std::nullopt;
  std::vector<int64_t> operands(2, -1);
  if (dim < r - 2) {
    operands[0] = alignedDim(op.operand(0), shapeOf(y), dim);
    operands[1] = alignedDim(op.operand(1), shapeOf(y), dim);
    if (operands[0] < 0 && operands[1] < 0)
      return std::nullopt;
  } else if (dim == r - 2) {
    operands[0] = ra - 2;
  } else {
    operands[1] = rb - 1;
  }
  return plan(std::move(operands), {dim});
}

std::optional<SplitPlan> gemm(const Op& op, int64_t dim) {
  const Value* y = op.result();
  if (op.kind() == OpKind::MatMul && (y->type().rank() != 2 || op.operand(0)->type().rank() != 2 ||
                                      op.operand(1)->type().rank() != 2))
    return batchedMatMul(op, dim);
  if (y->type().rank() != 2 || op.operand(0)->type().rank() != 2 ||
      op.operand(1)->type().rank() != 2 || (dim != 0 && dim != 1))
    return std::nullopt;
  bool gemm = op.kind() == OpKind::Gemm;
  bool ta = gemm && op.getInt("transA"), tb = gemm && op.getInt("transB");
  std::vector<int64_t> operands(op.numOperands(), -1);
  if (dim == 0)
    operands[0] = ta ? 1 : 0; // rows of A
  else
    operands[1] = tb ? 0 : 1; // columns of B
  if (op.numOperands() > 2)
    operands[2] = alignedDim(op.operand(2), shapeOf(y), dim);
  return plan(std::move(operands), {dim});
}

std::optional<SplitPlan> reshapeLeading(const Op& op, int64_t dim) {
  if (dim != 0 || op.operand(0)->type().rank() == 0 || op.result()->type().rank() == 0)
    return std::nullopt;
  if (op.kind() == OpKind::Flatten && op.getInt("axis") < 1)
    return std::nullopt;
  const int64_t a = shapeOf(op.operand(0))[0], r = shapeOf(op.result())[0];
  if (a == r)
    return plan({0}, {0});
  if (a < 1 || r < 1)
    return std::nullopt;
  // Row-major, result row i holds the flat elements [i * R, (i + 1) * R)
  // (R = numel / r). Where the reshape merges each operand row into f rows
  // of the result ([B, T, D] to [B * T, D]: f = T), result rows [b, e) are
  // operand rows [b / f, e / f) when b and e are multiples of f (the
  // granule); where it splits each operand row into f ([B * T, D] to
  // [B, T, D]), result rows [b, e) are operand rows [b * f, e * f).
  if (r % a == 0) {
    const int64_t f = r / a;
    SplitPlan p = plan({0}, {0});
    p.granule = f;
    p.window = [f](int64_t begin, int64_t end) { return std::make_pair(begin / f, end / f); };
    return p;
  }
  if (a % r == 0) {
    const int64_t f = a / r;
    SplitPlan p = plan({0}, {0});
    p.window = [f](int64_t begin, int64_t end) { return std::make_pair(begin * f, end * f); };
    return p;
  }
  return std::nullopt;
}

std::optional<SplitPlan> concat(const Op& op, int64_t dim) {
  int64_t rank = op.result()->type().rank();
  int64_t axis = op.getInt("axis");
  if (axis < 0)
    axis += rank;
  if (dim == axis || !validDim(op.result(), dim))
    return std::nullopt;
  return plan(std::vector<int64_t>(op.numOperands(), dim), {dim});
}

std::optional<SplitPlan> softmax(const Op& op, int64_t dim) {
  int64_t rank = op.result()->type().rank();
  int64_t axis = op.getInt("axis");
  if (axis < 0)
    axis += rank;
  // Dims before the normalized axis hold independent rows.
  if (dim < 0 || dim >= axis)
    return std::nullopt;
  return plan({dim}, {dim});
}

std::optional<SplitPlan> batchNormTrain(const Op&, int64_t dim) {
  // Channels: each device normalizes its own channels.
  if (dim == 1)
    return plan({1, 0, 0}, {1, 0, 0});
  // Samples: the statistics must cover the whole batch, so materialize
  // computes them from partial sums all-reduced across the devices; the
  // mean and variance come out whole on every device.
  if (dim == 0)
    return plan({0, -1, -1}, {0, -1, -1});
  return std::nullopt;
}

std::optional<SplitPlan> loss(const Op& op, int64_t dim) {
  // softmax_xent: logits [N,...,K] and labels [N,...] by sample; mse_loss:
  // pred and target alike. The mean over the shard is weighted by its share
  // of the samples or, with an ignore_index, of the labels that count.
  if (!validDim(op.operand(0), dim))
    return std::nullopt;
  if (op.kind() == OpKind::SoftmaxXent && dim != 0)
    return std::nullopt;
  if (op.kind() == OpKind::SoftmaxXent && op.hasAttr("ignore_index"))
    return plan({0, 0}, {-1}, SplitPlan::Partial::LabelMean);
  return plan({dim, dim}, {-1}, SplitPlan::Partial::Mean);
}

std::optional<SplitPlan> transpose(const Op& op, int64_t dim) {
  const std::vector<int64_t>& perm = op.getInts("perm");
  if (!validDim(op.result(), dim) || dim >= static_cast<int64_t>(perm.size()))
    return std::nullopt;
  return plan({perm[dim]}, {dim});
}

std::optional<SplitPlan> gather(const Op& op, int64_t dim) {
  const int64_t rank = op.operand(0)->type().rank(), q = op.operand(1)->type().rank();
  int64_t axis = op.getInt("axis");
  if (axis < 0)
    axis += rank;
  if (!validDim(op.result(), dim) || shapeOf(op.result())[dim] == 1)
    return std::nullopt;
  if (dim < axis)
    return plan({dim, -1}, {dim});
  if (dim < axis + q) // the lookups: each device its indices' rows, the table whole
    return plan({-1, dim - axis}, {dim});
  return plan({dim - q + 1, -1}, {dim});
}

std::optional<SplitPlan> slice(const Op& op, int64_t dim) {
  const Value* x = op.operand(0);
  if (!validDim(op.result(), dim) || shapeOf(op.result())[dim] != shapeOf(x)[dim] ||
      shapeOf(x)[dim] == 1)
    return std::nullopt;
  // A dim the slice takes whole (not among its axes, or all of it).
  const int64_t rank = x->type().rank();
  if (op.hasAttr("axes"))
    for (size_t k = 0; k < op.getInts("axes").size(); ++k) {
      int64_t a = op.getInts("axes")[k];
      if ((a < 0 ? a + rank : a) == dim &&
          (op.getInts("starts")[k] != 0 || (op.hasAttr("steps") && op.getInts("steps")[k] != 1)))
        return std::nullopt;
    }
  else if (dim < static_cast<int64_t>(op.getInts("starts").size()) &&
           op.getInts("starts")[dim] != 0)
    return std::nullopt;
  return plan({dim}, {dim});
}

std::optional<SplitPlan> pad(const Op& op, int64_t dim) {
  const int64_t rank = op.operand(0)->type().rank();
  const std::vector<int64_t>& pads = op.getInts("pads");
  if (!validDim(op.result(), dim) || static_cast<int64_t>(pads.size()) != 2 * rank ||
      pads[dim] != 0 || pads[dim + rank] != 0 || shapeOf(op.result())[dim] == 1)
    return std::nullopt;
  return plan({dim}, {dim});
}

std::optional<SplitPlan> split(const Op& op, int64_t dim) {
  const int64_t rank = op.operand(0)->type().rank();
  int64_t axis = op.getInt("axis");
  if (axis < 0)
    axis += rank;
  if (dim == axis || !validDim(op.operand(0), dim) || shapeOf(op.operand(0))[dim] == 1)
    return std::nullopt;
  return plan({dim}, std::vector<int64_t>(op.numResults(), dim));
}

std::optional<SplitPlan> layerNorm(const Op& op, int64_t dim) {
  // Rows before the normalized axis are independent; scale and bias whole.
  const int64_t rank = op.operand(0)->type().rank();
  int64_t axis = op.getInt("axis");
  if (axis < 0)
    axis += rank;
  if (dim < 0 || dim >= axis || shapeOf(op.operand(0))[dim] == 1)
    return std::nullopt;
  return plan({dim, -1, -1}, {dim, dim, dim});
}

std::optional<SplitPlan> reduce(const Op& op, int64_t dim) {
  const Value* x = op.operand(0);
  if (!validDim(x, dim))
    return std::nullopt;
  int64_t rank = x->type().rank();
  std::vector<bool> reduced(rank, !op.hasAttr("axes"));
  if (op.hasAttr("axes"))
    for (int64_t a : op.getInts("axes"))
      reduced[a < 0 ? a + rank : a] = true;
  if (reduced[dim])
    return plan({dim}, {-1},
                op.kind() == OpKind::ReduceMean ? SplitPlan::Partial::Mean
                                                : SplitPlan::Partial::Sum);
  // A kept dim: its position in the result.
  int64_t at = 0;
  for (int64_t d = 0; d < dim; ++d)
    at += !reduced[d] || op.getInt("keepdims");
  return plan({dim}, {at});
}

std::optional<SplitPlan> dropoutMask(const Op& op, int64_t dim) {
  if (!validDim(op.result(), dim))
    return std::nullopt;
  return plan({-1}, {dim}); // the step counter, whole
}

void localizeShape(Op& local, const Op&, int64_t, int64_t) {
  local.setAttr("shape", Attribute(local.result()->type().shape));
}

void localizeDropoutMask(Op& local, const Op& global, int64_t dim, int64_t offset) {
  // The mask of a shard is the whole mask's elements at the shard's place:
  // the RNG is keyed by the element's index in the whole tensor.
  const Shape& whole = global.result()->type().shape;
  std::vector<int64_t> offsets(whole.size(), 0);
  if (global.hasAttr("whole_shape")) {
    offsets = global.getInts("offsets");
    local.setAttr("whole_shape", Attribute(global.getInts("whole_shape")));
  } else {
    local.setAttr("whole_shape", Attribute(std::vector<int64_t>(whole)));
  }
  offsets[dim] += offset;
  local.setAttr("offsets", Attribute(offsets));
  local.setAttr("shape", Attribute(local.result()->type().shape));
}

} // namespace lwcc::par
