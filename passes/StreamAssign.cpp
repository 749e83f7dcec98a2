//===- StreamAssign.cpp - Weight gradients and updates on a second stream -===//
//
// Puts the work no later op of the backward data-gradient chain waits for
// on stream 1, the rest staying on stream 0, so that on a GPU the weight
// gradients and updates of a layer overlap the data gradients of the layers
// below it. Codegen turns the streams into the events that order them:
// every cross-stream dependence, through a value or through planned bytes
// that are reused, becomes a wait.
//
// Stream 1 gets:
//  - the optimizer: lr_schedule, sgd_update, adam_update and the assigns;
//  - the ops whose results are all used only by those or as graph outputs
//    other than #0 (the loss stays on 0): each param's final gradient
//    computation (conv2d_grad_filter, the gemm of a weight gradient, the
//    bias reductions), which nothing on the data-gradient chain waits for.
// The rule does not propagate further up: a data gradient that only weight
// gradients use (the first layer's) could go too, but then, transitively,
// would the whole chain above it. Streams chosen earlier (grad-sync's
// all-reduces, a pipeline's transfers) stay. Options: streams=N (1 or 2; 1 puts
// everything on stream 0, which prints as no annotation).
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"

#include <set>

namespace lwcc {

namespace {

class StreamAssignPass : public Pass {
public:
  explicit StreamAssignPass(int64_t streams) : streams_(streams) {}
  std::string_view name() const override { return "stream-assign"; }

  llvm::Error run(Graph& g, PassContext&) override {
    if (streams_ < 2) {
      for (auto& op : g.ops())
        op->annotations().stream.reset();
      return llvm::Error::success();
    }
    std::set<const Op*> side;
    std::vector<Op*> order;
    for (auto& op : g.ops())
      order.push_back(op.get());
    for (Op* op : order)
      if (op->kind() == OpKind::LrSchedule || op->kind() == OpKind::SgdUpdate ||
          op->kind() == OpKind::AdamUpdate || op->kind() == OpKind::Assign)
        side.insert(op);
    const std::set<const Op*> optimizer = side;
    for (Op* op : order) {
      // Communication ops keep the streams their passes chose (grad-sync's
      // all-reduces, a pipeline's transfers) and are placed by their
      // attributes, not by @dev.
      if (side.count(op) || op->numResults() == 0 || op->info().isCommunication())
        continue;
      bool onlySide = true;
      for (unsigned r = 0; r < op->numResults() && onlySide; ++r) {
        if (!op->result(r)->hasUses())
          onlySide = false;
        for (const Use& u : op->result(r)->uses())
          if (u.user ? !optimizer.count(u.user) : u.index == 0) // output #0: the loss
            onlySide = false;
      }
      if (onlySide)
        side.insert(op);
    }
    for (const Op* op : side) { // a stream belongs to a device: the one there is
      Op* o = const_cast<Op*>(op);
      if (o->annotations().stream.value_or(0) != 0)
        continue; // already on a stream of its own
      o->annotations().device = o->annotations().device.value_or(0);
      o->annotations().stream = 1;
    }
    return llvm::Error::success();
  }

private:
  int64_t streams_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createStreamAssignPass(std::string_view options) {
  auto parsed = PassOptions::parse("stream-assign", options, "streams", {"streams"});
  if (!parsed)
    return parsed.takeError();
  auto streams = parsed->getInt("streams", 2);
  if (!streams)
    return streams.takeError();
  if (*streams < 1 || *streams > 2)
    return makeError("stream-assign: streams=" + std::to_string(*streams) +
                     " is not 1 or 2 (more streams come with the scheduler)");
  return std::make_unique<StreamAssignPass>(*streams);
}

} // namespace lwcc
