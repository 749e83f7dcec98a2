//===- LossScale.cpp - Dynamic loss scaling for fp16 training -------------===//
//
// `loss-scale=init=65536,interval=2000` (after autodiff, grad-sync and the
// optimizer) makes an fp16 step what PyTorch's GradScaler makes it:
//
//   scale  = loss_scale == 0 ? init : loss_scale     a param per device,
//                                                    zero at the start
//   backward starts from `scale` instead of 1        (the seed autodiff made)
//   g'     = g * (1 / scale)                         each param gradient,
//                                                    exact: scale is 2^k
//   finite = all_finite(g'...)                       per device
//   param, optimizer state <- finite ? updated : unchanged
//   loss_scale  <- finite ? (good + 1 == interval ? 2 scale : scale)
//                         : scale / 2
//   loss_scale.good_steps <- finite && good + 1 < interval ? good + 1 : 0
//
// A step whose fp16 gradients overflowed (or whose loss was not finite)
// changes no param and no optimizer state; it halves the scale. After
// `interval` finite steps in a row the scale doubles. Batch norm's running
// statistics and the step counter advance on every step (the lr schedule
// counts steps, as a PyTorch scheduler stepped in the loop does). Adam's
// bias correction counts the updates made, as PyTorch's Adam, whose step
// GradScaler skips, does: its updates read a counter of their own
// (`opt.adam_step`, an int64 param per device) that advances on finite
// steps only.
//
// The scale lives in float32 params named loss_scale and
// loss_scale.good_steps, one pair per device that holds gradients or the
// loss. On several devices an all-reduce of their overflow counts gives
// all one flag, so every device skips the same steps and the pairs stay
// equal. Checkpoints keep them.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include <cmath>
#include <map>
#include <sstream>
#include <unordered_set>

namespace lwcc {

namespace {

constexpr const char* kScaleParam = "loss_scale";
constexpr const char* kGoodStepsParam = "loss_scale.good_steps";

class LossScalePass : public Pass {
public:
  LossScalePass(double init, int64_t interval) : init_(init), interval_(interval) {}
  std::string_view name() const override { return "loss-scale"; }

  llvm::Error run(Graph& g, PassContext&) override {
    for (const auto& p : g.params())
      if (p->paramName() == kScaleParam)
        return makeError("loss-scale: graph @" + g.name() + " is scaled already");
    Op* seed = nullptr;
    for (const auto& op : g.ops())
      if (isGradientSeed(*op) && op->hasAttr("value") &&
          op->getFloats("value") == std::vector<double>{1.0}) {
        if (seed)
          return op->emitError("loss-scale: two loss gradient seeds in graph @" + g.name());
        seed = op.get();
      }
    if (!seed)
      return makeError("loss-scale: graph @" + g.name() +
                       " has no loss gradient seed (run autodiff first)");

    Builder b(g);
    Location loc;
    loc.name = "loss-scale";
    b.setLoc(loc);
    UniqueNames names(g);
    auto constant = [&](double v) {
      Op* c = b.create(OpKind::Constant, {}, {TensorType(DType::F32, {})});
      c->setAttr("value", Attribute(std::vector<double>{v}));
      return c->result();
    };
    auto compare = [&](Value* a, Value* c, const char* kind) {
      return b.createInferred(OpKind::Compare, {a, c}, {{"kind", Attribute(std::string(kind))}});
    };

    // The state and the scale of each device, made before the seed.
    struct PerDevice {
      Value* state = nullptr;
      Value* good = nullptr;
      Value* scale = nullptr;
      Value* inverse = nullptr;
      std::vector<Value*> grads; ///< unscaled
    };
    std::map<int64_t, PerDevice> devices;
    auto onDevice = [&](int64_t d) -> llvm::Expected<PerDevice*> {
      auto it = devices.find(d);
      if (it != devices.end())
        return &it->second;
      PerDevice& pd = devices[d];
      b.setInsertionPointBefore(seed);
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      const std::string suffix = d ? ".d" + std::to_string(d) : "";
      auto param = [&](const char* what) {
        Value* s = g.addParam(names(what + suffix), what, TensorType(DType::F32, {}));
        s->setZeroInit(true);
        if (d)
          s->setDevice(d);
        return s;
      };
      pd.state = param(kScaleParam);
      pd.good = param(kGoodStepsParam);
      auto fresh = compare(pd.state, constant(0), "equal");
      if (!fresh)
        return fresh.takeError();
      auto scale = b.createInferred(OpKind::Where, {(*fresh)->result(), constant(init_), pd.state});
      if (!scale)
        return scale.takeError();
      pd.scale = (*scale)->result();
      pd.scale->setName(names("loss_scale.value" + suffix));
      auto inverse = b.createInferred(OpKind::Div, {constant(1), pd.scale});
      if (!inverse)
        return inverse.takeError();
      pd.inverse = (*inverse)->result();
      return &pd;
    };

    // Every device's scale before the seed, which goes: backward starts
    // from the scale.
    const std::optional<int64_t> seedDevice = seed->annotations().device;
    auto seedPd = onDevice(seedDevice.value_or(0));
    if (!seedPd)
      return seedPd.takeError();
    for (size_t i = 0; i < g.outputs().size(); ++i)
      if (Value* p = g.outputGradOf(i))
        if (auto pd = onDevice(p->device().value_or(0)); !pd)
          return pd.takeError();
    if (seed->result()->type() != (*seedPd)->scale->type())
      return seed->emitError("loss-scale: the loss is not a float32 scalar");
    seed->result()->replaceAllUsesWith((*seedPd)->scale);
    g.eraseOp(seed);

    // Each param gradient unscaled right after it is made.
    std::unordered_set<const Value*> trained;
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      Value* p = g.outputGradOf(i);
      if (!p)
        continue;
      trained.insert(p);
      Value* grad = g.outputs()[i];
      if (grad->type().dtype != DType::F32)
        return makeError("loss-scale: the gradient of '%" + p->name() + "' is not float32");
      const int64_t d = p->device().value_or(0);
      PerDevice& pd = devices.at(d); // made above
      Op* def = grad->definingOp();
      if (!def)
        return makeError("loss-scale: the gradient of '%" + p->name() + "' is not computed");
      b.setInsertionPointAfter(def);
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      b.setLoc(def->loc());
      auto unscaled = b.createInferred(OpKind::Mul, {grad, pd.inverse});
      if (!unscaled)
        return unscaled.takeError();
      Value* u = (*unscaled)->result();
      grad->replaceAllUsesWith(u);
      (*unscaled)->setOperand(0, grad);
      const std::string name = grad->name();
      grad->setName(names(name + ".scaled"));
      u->setName(name);
      pd.grads.push_back(u);
    }
    b.setLoc(loc);

    // The flag of each device after its last gradient. Several devices
    // agree on one: each counts its own non-finite gradients (0 or 1), an
    // all-reduce sums the counts, and a step is skipped everywhere or
    // nowhere (a device may hold the loss and no gradient, or gradients of
    // params no other device has).
    std::unordered_set<const Op*> unscaling;
    for (const auto& [d, pd] : devices)
      for (const Value* u : pd.grads)
        unscaling.insert(u->definingOp());
    Op* last = nullptr;
    for (const auto& op : g.ops())
      if (unscaling.count(op.get()))
        last = op.get();
    if (!last)
      return makeError("loss-scale: graph @" + g.name() + " has no param gradient");
    b.setInsertionPointAfter(last);
    auto flagName = [&](int64_t d) {
      return names(d ? "grads_finite.d" + std::to_string(d) : "grads_finite");
    };
    std::map<int64_t, Value*> finite;
    std::vector<Value*> counts;
    std::vector<int64_t> ids;
    for (auto& [d, pd] : devices) {
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      Value* count = nullptr;
      if (!pd.grads.empty()) {
        auto all = b.createInferred(OpKind::AllFinite, pd.grads);
        if (!all)
          return all.takeError();
        finite[d] = (*all)->result();
        if (devices.size() == 1) {
          finite[d]->setName(flagName(d));
          break;
        }
        auto c = b.createInferred(OpKind::Where, {finite[d], constant(0), constant(1)});
        if (!c)
          return c.takeError();
        count = (*c)->result();
      } else {
        count = constant(0);
      }
      counts.push_back(count);
      ids.push_back(d);
    }
    if (devices.size() > 1) {
      b.setDevice(std::nullopt);
      auto sums = b.createInferred(OpKind::AllReduce, counts, {{"devices", Attribute(ids)}},
                                   static_cast<unsigned>(counts.size()));
      if (!sums)
        return sums.takeError();
      for (size_t i = 0; i < ids.size(); ++i) {
        b.setDevice(ids[i] ? std::optional<int64_t>(ids[i]) : std::nullopt);
        auto none = compare((*sums)->result(static_cast<unsigned>(i)), constant(0), "equal");
        if (!none)
          return none.takeError();
        finite[ids[i]] = (*none)->result();
        finite[ids[i]]->setName(flagName(ids[i]));
      }
    }

    // Params and optimizer state keep their values where the flag is down.
    std::vector<Op*> assigns;
    for (const auto& op : g.ops())
      if (op->kind() == OpKind::Assign) {
        const Value* target = op->operand(0);
        if (trained.count(target) || target->paramName().rfind("opt.", 0) == 0)
          assigns.push_back(op.get());
      }
    for (Op* assign : assigns) {
      Value* target = assign->operand(0);
      auto it = finite.find(target->device().value_or(0));
      if (it == finite.end())
        return assign->emitError("loss-scale: no gradient on the device of '%" + target->name() +
                                 "'");
      b.setInsertionPointBefore(assign);
      b.setDevice(target->device());
      auto kept = b.createInferred(OpKind::Where, {it->second, assign->operand(1), target});
      if (!kept)
        return kept.takeError();
      assign->setOperand(1, (*kept)->result());
    }

    // Adam's updates count the finite steps, not every step.
    std::map<int64_t, Value*> adamSteps;
    std::vector<Op*> adams;
    for (const auto& op : g.ops())
      if (op->kind() == OpKind::AdamUpdate)
        adams.push_back(op.get());
    for (Op* adam : adams) {
      const int64_t d = adam->annotations().device.value_or(0);
      if (!finite.count(d))
        return adam->emitError("loss-scale: no gradient on the device of this Adam update");
      Value*& counter = adamSteps[d];
      if (!counter) {
        counter = g.addParam(names(d ? "opt.adam_step.d" + std::to_string(d) : "opt.adam_step"),
                             "opt.adam_step", adam->operand(5)->type());
        counter->setZeroInit(true);
        if (d)
          counter->setDevice(d);
      }
      adam->setOperand(5, counter);
    }

    // The scale's own update, at the end of the step.
    b.setInsertionPointToEnd();
    for (auto& [d, counter] : adamSteps) {
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      auto made =
          b.createInferred(OpKind::Cast, {finite.at(d)},
                           {{"to", Attribute(std::string(dtypeName(counter->type().dtype)))}});
      if (!made)
        return made.takeError();
      auto next = b.createInferred(OpKind::Add, {counter, (*made)->result()});
      if (!next)
        return next.takeError();
      appendAssign(g, counter, (*next)->result(), loc);
    }
    for (auto& [d, pd] : devices) {
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      Value* ok = finite.at(d);
      auto next = b.createInferred(OpKind::Add, {pd.good, constant(1)});
      if (!next)
        return next.takeError();
      auto full =
          compare((*next)->result(), constant(static_cast<double>(interval_)), "greater_or_equal");
      auto grown = b.createInferred(OpKind::Mul, {pd.scale, constant(2)});
      auto halved = b.createInferred(OpKind::Mul, {pd.scale, constant(0.5)});
      if (!full || !grown || !halved)
        return llvm::joinErrors(full.takeError(),
                                llvm::joinErrors(grown.takeError(), halved.takeError()));
      auto kept =
          b.createInferred(OpKind::Where, {(*full)->result(), (*grown)->result(), pd.scale});
      if (!kept)
        return kept.takeError();
      auto scale = b.createInferred(OpKind::Where, {ok, (*kept)->result(), (*halved)->result()});
      if (!scale)
        return scale.takeError();
      Value* zero = constant(0);
      auto count = b.createInferred(OpKind::Where, {(*full)->result(), zero, (*next)->result()});
      if (!count)
        return count.takeError();
      auto good = b.createInferred(OpKind::Where, {ok, (*count)->result(), zero});
      if (!good)
        return good.takeError();
      appendAssign(g, pd.state, (*scale)->result(), loc);
      appendAssign(g, pd.good, (*good)->result(), loc);
    }
    return llvm::Error::success();
  }

private:
  double init_;
  int64_t interval_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createLossScalePass(std::string_view options) {
  auto opts = PassOptions::parse("loss-scale", options, "init", {"init", "interval"});
  if (!opts)
    return opts.takeError();
  auto init = opts->getFloat("init", 65536.0);
  if (!init)
    return init.takeError();
  auto interval = opts->getInt("interval", 2000);
  if (!interval)
    return interval.takeError();
  int exponent = 0;
  if (!(*init > 0) || std::frexp(*init, &exponent) != 0.5 || exponent < -100 || exponent > 100) {
    std::ostringstream got;
    got << *init;
    return makeError("loss-scale: init must be a power of two (e.g. 65536), got " + got.str());
  }
  if (*interval < 1)
    return makeError("loss-scale: interval must be >= 1");
  return std::make_unique<LossScalePass>(*init, *interval);
}

} // namespace lwcc
