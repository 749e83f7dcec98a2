//===- Canonicalize.cpp - Local simplifications ---------------------------===//
#include "passes/Pass.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace lwcc {

namespace {

/// Results up to this many elements are folded when all operands are constants.
constexpr int64_t kMaxFoldElements = 1024;

/// Erases `op` after its results have been replaced, then any operand-defining
/// op that this left without uses.
void eraseAndPrune(Graph& g, Op* op) {
  std::vector<Op*> worklist{op};
  while (!worklist.empty()) {
    Op* dead = worklist.back();
    worklist.pop_back();
    std::vector<Op*> defs;
    for (Value* v : dead->operands())
      if (Op* def = v->definingOp())
        defs.push_back(def);
    g.eraseOp(dead);
    for (Op* def : defs)
      if (!def->hasUsedResults() &&
          std::find(worklist.begin(), worklist.end(), def) == worklist.end())
        worklist.push_back(def);
  }
}

/// Replaces the single result of `op` by `v` (keeping the result's name when
/// `v` is new and unnamed) and erases what became dead.
void replaceOp(Graph& g, Op* op, Value* v) {
  std::string name = op->result()->name();
  op->result()->replaceAllUsesWith(v);
  eraseAndPrune(g, op);
  if (v->name().empty())
    v->setName(name);
}

bool isConstant(const Value* v) {
  return v->definingOp() && v->definingOp()->kind() == OpKind::Constant;
}

/// The elements of a constant, with a splat expanded.
std::vector<double> constantValues(const Op& c) {
  const TensorType& t = c.result()->type();
  std::vector<double> vals;
  if (isFloat(t.dtype)) {
    vals = c.getFloats("value");
  } else {
    for (int64_t v : c.getInts("ivalue"))
      vals.push_back(static_cast<double>(v));
  }
  if (vals.size() == 1 && t.numElements() != 1)
    vals.assign(t.numElements(), vals[0]);
  return vals;
}

/// Row-major strides of `shape` as seen from a broadcast result of rank
/// `rank`: 0 where the dim is broadcast.
std::vector<int64_t> broadcastStrides(const Shape& shape, size_t rank) {
  std::vector<int64_t> strides(rank, 0);
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    size_t o = rank - shape.size() + i;
    strides[o] = shape[i] == 1 ? 0 : s;
    s *= shape[i];
  }
  return strides;
}

using ScalarFn = std::function<double(double, double)>;

/// The scalar function of a foldable op, for element type `t`; null when the
/// op does not fold for that type.
ScalarFn scalarFn(const Op& op, DType t) {
  bool fp = isFloat(t);
  switch (op.kind()) {
  case OpKind::Add:
    return [](double a, double b) { return a + b; };
  case OpKind::Sub:
    return [](double a, double b) { return a - b; };
  case OpKind::Mul:
    return [](double a, double b) { return a * b; };
  case OpKind::Div:
    // Integer division's rounding is left to the backends: not folded.
    if (!fp)
      return nullptr;
    return [](double a, double b) { return a / b; };
  case OpKind::Relu:
    return [](double a, double) { return a > 0 ? a : 0.0; };
  case OpKind::LeakyRelu: {
    double alpha = op.getFloat("alpha");
    return [alpha](double a, double) { return a >= 0 ? a : alpha * a; };
  }
  case OpKind::Sigmoid:
    return [](double a, double) { return 1.0 / (1.0 + std::exp(-a)); };
  case OpKind::Tanh:
    return [](double a, double) { return std::tanh(a); };
  case OpKind::Clip: {
    double lo = op.getFloat("min"), hi = op.getFloat("max");
    return [lo, hi](double a, double) { return std::min(std::max(a, lo), hi); };
  }
  default:
    return nullptr;
  }
}

/// Integers are folded through doubles, which hold them exactly only below
/// 2^53 in magnitude; larger values (or results) are left to the backends.
bool exactInteger(double v) { return std::fabs(v) < 9007199254740992.0; }
bool exactIntegers(const std::vector<double>& values) {
  return std::all_of(values.begin(), values.end(), exactInteger);
}

/// Rounds a folded value to what the element type can hold.
double roundTo(double v, DType t) {
  switch (t) {
  case DType::F32:
    return static_cast<double>(static_cast<float>(v));
  case DType::I32:
    return static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(v)));
  default:
    return v;
  }
}

class CanonicalizePass : public Pass {
public:
  std::string_view name() const override { return "canonicalize"; }

  /// Applies the rewrites below to every op, in order, until none applies
  /// (bounded by a sweep count, since each rewrite removes an op).
  llvm::Error run(Graph& g, PassContext&) override {
    bool changed = true;
    const size_t maxSweeps = 4 * g.numOps() + 4;
    for (size_t sweep = 0; changed && sweep < maxSweeps; ++sweep) {
      changed = false;
      for (auto it = g.ops().begin(); it != g.ops().end();) {
        Op* op = it->get();
        ++it;
        // The next op may be erased as a dead operand of this one: only
        // operand-defining ops are pruned, and those precede `op`.
        if (dropIdentity(g, op) || foldReshapeChain(g, op) || foldConstant(g, op)) {
          changed = true;
          break; // iterators into pruned ops are gone: restart the sweep
        }
      }
    }
    return llvm::Error::success();
  }

private:
  /// identity(x) -> x. Also reshape/flatten to the operand's own type.
  static bool dropIdentity(Graph& g, Op* op) {
    bool noop = op->kind() == OpKind::Identity ||
                ((op->kind() == OpKind::Reshape || op->kind() == OpKind::Flatten) &&
                 op->operand(0)->type() == op->result()->type());
    if (!noop)
      return false;
    replaceOp(g, op, op->operand(0));
    return true;
  }

  /// reshape(reshape(x)) and reshape(flatten(x)) -> reshape(x): only the
  /// outer shape matters. Also flatten(reshape|flatten(x)) -> reshape(x).
  static bool foldReshapeChain(Graph& g, Op* op) {
    if (op->kind() != OpKind::Reshape && op->kind() != OpKind::Flatten)
      return false;
    Op* inner = op->operand(0)->definingOp();
    if (!inner || (inner->kind() != OpKind::Reshape && inner->kind() != OpKind::Flatten))
      return false;
    Builder b(g);
    b.setInsertionPointBefore(op);
    b.setLoc(op->loc());
    Op* merged = b.create(OpKind::Reshape, {inner->operand(0)}, {op->result()->type()},
                          {{"shape", Attribute(op->result()->type().shape)}});
    merged->annotations() = op->annotations();
    replaceOp(g, op, merged->result());
    return true;
  }

  /// Elementwise ops (and reshapes) of small constants -> one constant.
  static bool foldConstant(Graph& g, Op* op) {
    if (op->numOperands() == 0 || op->numResults() != 1)
      return false;
    for (Value* v : op->operands())
      if (!isConstant(v))
        return false;
    const TensorType& out = op->result()->type();
    if (out.numElements() > kMaxFoldElements || out.dtype == DType::F16 ||
        out.dtype == DType::BF16 || out.dtype == DType::Bool)
      return false;
    std::vector<double> result;
    if (op->kind() == OpKind::Reshape || op->kind() == OpKind::Flatten) {
      result = constantValues(*op->operand(0)->definingOp());
    } else {
      ScalarFn fn = scalarFn(*op, out.dtype);
      if (!fn)
        return false;
      std::vector<double> a = constantValues(*op->operand(0)->definingOp());
      std::vector<double> b =
          op->numOperands() > 1 ? constantValues(*op->operand(1)->definingOp()) : a;
      if (isInteger(out.dtype) && (!exactIntegers(a) || !exactIntegers(b)))
        return false;
      auto sa = broadcastStrides(op->operand(0)->type().shape, out.rank());
      auto sb = broadcastStrides(op->operand(op->numOperands() - 1)->type().shape, out.rank());
      result.resize(out.numElements());
      std::vector<int64_t> idx(out.rank(), 0);
      for (int64_t flat = 0; flat < out.numElements(); ++flat) {
        int64_t ia = 0, ib = 0;
        for (int64_t d = 0; d < out.rank(); ++d) {
          ia += idx[d] * sa[d];
          ib += idx[d] * sb[d];
        }
        double v = fn(a[ia], b[ib]);
        if (isInteger(out.dtype) && !exactInteger(v))
          return false;
        result[flat] = roundTo(v, out.dtype);
        for (int64_t d = out.rank(); d-- > 0;) {
          if (++idx[d] < out.shape[d])
            break;
          idx[d] = 0;
        }
      }
    }
    if (isInteger(out.dtype) && !exactIntegers(result)) // a reshaped constant
      return false;
    Builder b(g);
    b.setInsertionPointBefore(op);
    b.setLoc(op->loc());
    Op* c = b.create(OpKind::Constant, {}, {out});
    if (isFloat(out.dtype)) {
      c->setAttr("value", Attribute(result));
    } else {
      std::vector<int64_t> ints(result.begin(), result.end());
      c->setAttr("ivalue", Attribute(ints));
    }
    replaceOp(g, op, c->result());
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createCanonicalizePass() { return std::make_unique<CanonicalizePass>(); }

} // namespace lwcc
