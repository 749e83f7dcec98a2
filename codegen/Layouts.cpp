//===- Layouts.cpp - Which activations CPU trainers keep blocked ----------===//
#include "codegen/Layouts.h"

#include <map>
#include <string>
#include <vector>

namespace lwcc::codegen {

namespace {

/// Values grouped by the layout they must share, and what each group allows.
class Plan {
public:
  const Value* root(const Value* v) {
    auto it = parent_.find(v);
    if (it == parent_.end() || it->second == v)
      return v;
    const Value* r = root(it->second);
    parent_[v] = r;
    return r;
  }
  void join(const Value* a, const Value* b) {
    const Value *ra = root(a), *rb = root(b);
    if (ra != rb)
      parent_[ra] = rb;
  }
  /// `v` stays row-major: an op touches it where it takes no other layout.
  void rowMajor(const Value* v) { rowMajor_.insert(v); }
  /// `v` is a convolution's activation there.
  void conv(const Value* v) { conv_.insert(v); }

  std::set<const Value*> blocked(const Graph& g) {
    std::set<const Value*> outputs(g.outputs().begin(), g.outputs().end());
    std::map<const Value*, std::vector<const Value*>> groups;
    for (const auto& op : g.ops())
      for (unsigned r = 0; r < op->numResults(); ++r)
        groups[root(op->result(r))].push_back(op->result(r));
    // Groups joined with an input or a param (the input buffer, the state)
    // stay row-major.
    std::set<const Value*> held;
    for (const auto& v : g.inputs())
      held.insert(root(v.get()));
    for (const auto& v : g.params())
      held.insert(root(v.get()));
    std::set<const Value*> out;
    for (const auto& [root, members] : groups) {
      bool ok = true, convolved = false;
      for (const Value* v : members) {
        const TensorType& t = v->type();
        ok &= t.dtype == DType::F32 && t.shape.size() == 4 && t.shape[1] % 8 == 0 &&
              t.shape[2] * t.shape[3] > 1 && v->kind() == ValueKind::Result && !outputs.count(v) &&
              !rowMajor_.count(v);
        convolved |= conv_.count(v) > 0;
      }
      if (ok && convolved && !held.count(root))
        out.insert(members.begin(), members.end());
    }
    return out;
  }

private:
  std::map<const Value*, const Value*> parent_;
  std::set<const Value*> rowMajor_, conv_;
};

/// Every operand and result of `op` has its first result's shape.
bool sameShapes(const Op& op) {
  const auto& shape = op.result(0)->type().shape;
  for (const Value* v : op.operands())
    if (v->type().shape != shape)
      return false;
  for (unsigned r = 0; r < op.numResults(); ++r)
    if (op.result(r)->type().shape != shape)
      return false;
  return true;
}

/// Records what `op` allows of its operands' and results' layouts.
void visit(const Op& op, Plan& plan) {
  auto operand = [&](unsigned i) { return op.operand(i); };
  auto all = [&](bool blockedOk) {
    for (const Value* v : op.operands())
      blockedOk ? plan.join(v, op.result(0)) : plan.rowMajor(v);
    for (unsigned r = 0; r < op.numResults(); ++r)
      blockedOk ? plan.join(op.result(r), op.result(0)) : plan.rowMajor(op.result(r));
  };
  // Everything not named below stays row-major.
  auto only = [&](std::vector<const Value*> free, std::vector<const Value*> shared) {
    std::set<const Value*> allowed(free.begin(), free.end());
    allowed.insert(shared.begin(), shared.end());
    for (const Value* v : op.operands())
      if (!allowed.count(v))
        plan.rowMajor(v);
    for (unsigned r = 0; r < op.numResults(); ++r)
      if (!allowed.count(op.result(r)))
        plan.rowMajor(op.result(r));
    for (size_t k = 1; k < shared.size(); ++k)
      plan.join(shared[k], shared[0]);
  };
  switch (op.kind()) {
  case OpKind::Conv2d:
    plan.conv(operand(0));
    plan.conv(op.result());
    return only({operand(0), op.result()}, {});
  case OpKind::Conv2dGradInput:
    plan.conv(operand(0));
    plan.conv(op.result());
    return only({operand(0), op.result()}, {});
  case OpKind::Conv2dGradFilter:
    plan.conv(operand(0));
    plan.conv(operand(1));
    return only({operand(0), operand(1)}, {});
  case OpKind::MaxPool2d:
    return only({}, {operand(0), op.result()});
  case OpKind::MaxPool2dGrad:
    return only({}, {operand(0), operand(1), op.result()});
  case OpKind::GlobalAvgPool:
    return only({operand(0)}, {});
  case OpKind::BatchNormTrain:
  case OpKind::BatchNorm:
    return only({}, {operand(0), op.result(0)});
  case OpKind::BatchNormGrad:
    return only({}, {operand(0), operand(4), op.result(0)});
  case OpKind::ReduceSum:
    if (op.operand(0)->type().shape.size() == 4 && op.hasAttr("axes") &&
        op.getInts("axes") == std::vector<int64_t>{0, 2, 3} && op.getInt("keepdims") == 0)
      return only({operand(0)}, {});
    return all(false);
  case OpKind::Relu:
  case OpKind::LeakyRelu:
  case OpKind::Sigmoid:
  case OpKind::Tanh:
  case OpKind::Clip:
  case OpKind::ReluGrad:
  case OpKind::LeakyReluGrad:
  case OpKind::SigmoidGrad:
  case OpKind::TanhGrad:
  case OpKind::ClipGrad:
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Fused: // its kernel reads and writes element i of each alike
    return all(sameShapes(op));
  case OpKind::Concat:
  case OpKind::Split: {
    const int64_t rank = static_cast<int64_t>(op.result(0)->type().shape.size());
    const int64_t axis = op.getInt("axis");
    return all(rank == 4 && (axis == 1 || axis == 1 - rank));
  }
  default:
    // A view (reshape, flatten, identity) keeps its operand's bytes.
    if (op.info().kernel.fn && std::string(op.info().kernel.fn) == "copy" && op.numResults() == 1 &&
        op.numOperands() == 1)
      return all(sameShapes(op));
    return all(false);
  }
}

} // namespace

std::set<const Value*> blockedValues(const Graph& g) {
  Plan plan;
  for (const auto& op : g.ops())
    if (op->numResults() > 0 || op->numOperands() > 0) {
      if (op->numResults() == 0) {
        for (const Value* v : op->operands())
          plan.rowMajor(v);
        continue;
      }
      visit(*op, plan);
    }
  return plan.blocked(g);
}

} // namespace lwcc::codegen
