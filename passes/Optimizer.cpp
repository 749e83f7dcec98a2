//===- Optimizer.cpp - Parameter updates as IR ops ------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include <cstdlib>
#include <map>
#include <set>
#include <unordered_set>

namespace lwcc {

namespace {

struct OptimizerConfig {
  std::string kind = "sgd"; // sgd, adam, adamw
  double lr = 0.01, momentum = 0.9, weightDecay = 5e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t nesterov = 0;
  std::string schedule = "constant"; // constant, step, cosine
  int64_t warmup = 0, totalSteps = 0, stepSize = 0;
  double gamma = 0.1, minLr = 0.0;
  /// Parameter groups, first match wins: a glob over initializer names, an
  /// lr multiplier and a weight decay (negative: the optimizer's).
  struct Group {
    std::string pattern;
    double lrScale = 1.0, decay = -1.0;
  };
  std::vector<Group> groups;
  /// No weight decay on 1-D params: biases, normalization scales and shifts.
  bool noDecayBias = false, noDecayNorm = false;
};

/// The 1-D params that are a normalization's scale or shift.
std::set<const Value*> normParams(const Graph& g) {
  std::set<const Value*> out;
  for (const auto& op : g.ops())
    if (op->kind() == OpKind::BatchNorm || op->kind() == OpKind::BatchNormTrain ||
        op->kind() == OpKind::LayerNorm)
      for (unsigned i : {1u, 2u})
        if (i < op->numOperands() && op->operand(i)->kind() == ValueKind::Param)
          out.insert(op->operand(i));
  return out;
}

/// Updates every param that has a @grad output, in place:
///  1. lr = lr_schedule(step) (constant, step or cosine, with linear
///     warm-up), from the step counter param.
///  2. Per param: SGD with momentum and weight decay keeps a momentum
///     buffer; Adam and AdamW keep first and second moments. The state is
///     zero-initialized params named opt.<state>.<param initializer>.
///  3. Parameter groups (timm's and PyTorch's param_groups): the first group
///     whose glob matches the param's initializer name scales its lr and
///     may set its weight decay; no_decay gives 1-D params (biases,
///     normalization scales and shifts) no decay unless a group sets one.
///     A group that matches no updated param is an error naming it.
///  4. assign ops write the new param and state values, and step + 1, at
///     the end of the step. The @grad outputs stay, for inspection.
///  5. ZeRO stage 1: a copy whose gradient is its device's share of rows
///     from a reduce_scatter (grad-sync's shard=zero1) updates only that
///     share: its rows sliced from the param, its state a shard of the
///     logical state (shard(0: offset of rows)), so each device keeps 1/p of
///     it; an all_gather of the updated shares is written over every copy.
class OptimizerPass : public Pass {
public:
  explicit OptimizerPass(OptimizerConfig cfg) : cfg_(std::move(cfg)) {}
  std::string_view name() const override { return "optimizer"; }

  llvm::Error run(Graph& g, PassContext&) override {
    std::vector<std::pair<Value*, Value*>> updates; // (param, grad)
    for (size_t i = 0; i < g.outputs().size(); ++i)
      if (Value* p = g.outputGradOf(i))
        updates.emplace_back(p, g.outputs()[i]);
    if (updates.empty())
      return makeError("optimizer: graph @" + g.name() +
                       " has no @grad outputs (run autodiff first)");
    std::unordered_set<const Value*> updated;
    for (const auto& [p, grad] : updates)
      updated.insert(p);
    for (const auto& op : g.ops())
      if (op->kind() == OpKind::Assign && updated.count(op->operand(0)))
        return op->emitError("optimizer: param '%" + op->operand(0)->name() +
                             "' is already updated");

    Builder b(g);
    Location loc;
    loc.name = "optimizer";
    b.setLoc(loc);
    // Each device that holds params has its own step counter and learning
    // rate (one device: the graph's single ones).
    struct PerDevice {
      Value* step;
      Value* lr;
    };
    std::map<int64_t, PerDevice> devices;
    UniqueNames names(g);
    auto onDevice = [&](int64_t d) -> llvm::Expected<PerDevice> {
      auto it = devices.find(d);
      if (it != devices.end())
        return it->second;
      b.setLoc(loc);
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      Value* step = getOrCreateStepParam(g, d, &names);
      auto lr = b.createInferred(OpKind::LrSchedule, {step},
                                 {{"kind", Attribute(cfg_.schedule)},
                                  {"base_lr", Attribute(cfg_.lr)},
                                  {"warmup_steps", Attribute(cfg_.warmup)},
                                  {"total_steps", Attribute(cfg_.totalSteps)},
                                  {"step_size", Attribute(cfg_.stepSize)},
                                  {"gamma", Attribute(cfg_.gamma)},
                                  {"min_lr", Attribute(cfg_.minLr)}});
      if (!lr)
        return lr.takeError();
      Value* lrValue = (*lr)->result();
      lrValue->setName(names(d ? "lr.d" + std::to_string(d) : "lr"));
      return devices[d] = PerDevice{step, lrValue};
    };
    // The step counters that exist already (read by dropout masks) advance too.
    for (const auto& p : g.params())
      if (p->paramName() == kStepParam && p->device().value_or(0) != 0)
        if (auto pd = onDevice(*p->device()); !pd)
          return pd.takeError();

    std::set<const Value*> norms = normParams(g);
    std::vector<bool> groupUsed(cfg_.groups.size(), false);
    // (lr_scale, group_decay) of a param.
    auto groupOf = [&](const Value* p) {
      std::pair<double, double> out{1.0, -1.0};
      for (size_t i = 0; i < cfg_.groups.size(); ++i)
        if (globMatch(cfg_.groups[i].pattern, p->paramName())) {
          groupUsed[i] = true;
          out = {cfg_.groups[i].lrScale, cfg_.groups[i].decay};
          break;
        }
      if (out.second < 0 && p->wholeType().rank() <= 1 &&
          (norms.count(p) ? cfg_.noDecayNorm : cfg_.noDecayBias))
        out.second = 0;
      return out;
    };
    std::vector<std::pair<Value*, Value*>> assigns;
    // ZeRO-1: per reduce_scatter (in the order the params come), the copies
    // it feeds and their updated shares, by the position of the copy's
    // device.
    using Shares = std::map<unsigned, std::pair<Value*, Value*>>;
    std::vector<std::pair<const Op*, Shares>> gathers;
    std::map<const Op*, size_t> gatherOf;
    for (const auto& update : updates) {
      // Not a structured binding: Clang 14 cannot capture one in a lambda.
      Value* p = update.first;
      Value* grad = update.second;
      int64_t d = p->device().value_or(0);
      auto pd = onDevice(d);
      if (!pd)
        return pd.takeError();
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      Value* step = pd->step;
      Value* lrValue = pd->lr;
      Location ploc;
      ploc.name = "optimizer/" + p->paramName();
      b.setLoc(ploc);
      // What the update reads and writes: the param, or under ZeRO-1 this
      // device's share of its rows.
      Value* target = p;
      std::vector<ShardDim> stateShard = p->shard();
      const Op* scatter = grad->definingOp();
      const unsigned share = grad->resultIndex();
      // (Under FSDP a reduce_scatter's share is the gradient of the param's
      // own share: the shapes match and the update is a plain one.)
      if (scatter && scatter->kind() == OpKind::ReduceScatter &&
          grad->type().shape != p->type().shape) {
        std::vector<int64_t> sizes = scatter->getInts("sizes");
        int64_t from = 0;
        for (unsigned i = 0; i < share; ++i)
          from += sizes[i];
        auto rows =
            b.createInferred(OpKind::Slice, {p},
                             {{"starts", Attribute(std::vector<int64_t>{from})},
                              {"ends", Attribute(std::vector<int64_t>{from + sizes[share]})},
                              {"axes", Attribute(std::vector<int64_t>{0})}});
        if (!rows)
          return rows.takeError();
        target = (*rows)->result();
        target->setName(names(p->name() + ".share"));
        stateShard = {ShardDim{0, from, p->type().shape[0]}};
      }
      auto state = [&](const char* what) {
        Value* s = g.addParam(names(p->name() + "." + what),
                              std::string("opt.") + what + "." + p->paramName(), target->type());
        s->setZeroInit(true);
        s->setDevice(p->device());
        s->setShard(stateShard);
        return s;
      };
      // The param's new value: written whole, or its share gathered below.
      auto newParam = [&](Value* v) {
        if (target == p)
          assigns.emplace_back(p, v);
        else if (auto [it, added] = gatherOf.emplace(scatter, gathers.size()); added)
          gathers.push_back({scatter, {{share, {p, v}}}});
        else
          gathers[it->second].second[share] = {p, v};
      };
      auto [lrScale, groupDecay] = groupOf(p);
      std::vector<NamedAttr> groupAttrs;
      if (lrScale != 1.0)
        groupAttrs.push_back({"lr_scale", Attribute(lrScale)});
      if (groupDecay >= 0)
        groupAttrs.push_back({"group_decay", Attribute(groupDecay)});
      if (cfg_.kind == "sgd") {
        Value* m = state("momentum");
        std::vector<NamedAttr> attrs = {{"momentum", Attribute(cfg_.momentum)},
                                        {"weight_decay", Attribute(cfg_.weightDecay)},
                                        {"nesterov", Attribute(cfg_.nesterov)}};
        attrs.insert(attrs.end(), groupAttrs.begin(), groupAttrs.end());
        auto up =
            b.createInferred(OpKind::SgdUpdate, {target, grad, m, lrValue}, std::move(attrs), 2);
        if (!up)
          return up.takeError();
        newParam((*up)->result(0));
        assigns.emplace_back(m, (*up)->result(1));
      } else {
        Value* m = state("m");
        Value* v = state("v");
        std::vector<NamedAttr> attrs = {{"beta1", Attribute(cfg_.beta1)},
                                        {"beta2", Attribute(cfg_.beta2)},
                                        {"epsilon", Attribute(cfg_.eps)},
                                        {"weight_decay", Attribute(cfg_.weightDecay)},
                                        {"decoupled", Attribute(int64_t{cfg_.kind == "adamw"})}};
        attrs.insert(attrs.end(), groupAttrs.begin(), groupAttrs.end());
        auto up = b.createInferred(OpKind::AdamUpdate, {target, grad, m, v, lrValue, step},
                                   std::move(attrs), 3);
        if (!up)
          return up.takeError();
        newParam((*up)->result(0));
        assigns.emplace_back(m, (*up)->result(1));
        assigns.emplace_back(v, (*up)->result(2));
      }
    }
    // ZeRO-1: every copy gets the updated shares of all devices.
    for (const auto& [rs, shares] : gathers) {
      if (shares.size() != rs->numResults())
        return rs->emitError("optimizer: a reduce_scatter's shares are not all updated params");
      std::vector<Value*> parts;
      for (const auto& [i, pv] : shares)
        parts.push_back(pv.second);
      Location gloc;
      gloc.name = "optimizer/" + shares.begin()->second.first->paramName();
      b.setLoc(gloc);
      b.setDevice(std::nullopt);
      auto all = b.createInferred(
          OpKind::AllGather, parts,
          {{"devices", Attribute(rs->getInts("devices"))}, {"axis", Attribute(int64_t{0})}},
          static_cast<unsigned>(parts.size()));
      if (!all)
        return all.takeError();
      if (rs->annotations().stream)
        (*all)->annotations().stream = rs->annotations().stream;
      for (const auto& [i, pv] : shares) {
        (*all)->result(i)->setName(names(pv.first->name() + ".gathered"));
        assigns.emplace_back(pv.first, (*all)->result(i));
      }
    }
    for (size_t i = 0; i < cfg_.groups.size(); ++i)
      if (!groupUsed[i])
        return makeError("optimizer: the parameter group '" + cfg_.groups[i].pattern +
                         "' matches no trained parameter of graph @" + g.name());
    b.setLoc(loc);
    std::vector<std::pair<Value*, Value*>> steps;
    for (const auto& [d, pd] : devices) {
      b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      Op* one = b.create(OpKind::Constant, {}, {TensorType(DType::I64, {})});
      one->setAttr("ivalue", Attribute(std::vector<int64_t>{1}));
      auto next = b.createInferred(OpKind::Add, {pd.step, one->result()});
      if (!next)
        return next.takeError();
      steps.emplace_back(pd.step, (*next)->result());
    }
    for (const auto& [target, value] : assigns)
      appendAssign(g, target, value, loc);
    for (const auto& [step, next] : steps)
      appendAssign(g, step, next, loc);
    return llvm::Error::success();
  }

private:
  OptimizerConfig cfg_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createOptimizerPass(std::string_view options) {
  auto opts = PassOptions::parse("optimizer", options, "kind",
                                 {"kind", "lr", "momentum", "weight_decay", "nesterov", "beta1",
                                  "beta2", "eps", "schedule", "warmup", "total_steps", "step_size",
                                  "gamma", "min_lr", "no_decay", "groups"});
  if (!opts)
    return opts.takeError();
  OptimizerConfig c;
  c.kind = opts->getString("kind", "sgd");
  if (c.kind != "sgd" && c.kind != "adam" && c.kind != "adamw")
    return makeError("optimizer: unknown kind '" + c.kind + "' (expected sgd, adam or adamw)");
  // Adam's customary defaults differ from SGD's.
  double defaultWd = c.kind == "sgd" ? 5e-4 : c.kind == "adamw" ? 0.01 : 0.0;
  double defaultLr = c.kind == "sgd" ? 0.01 : 0.001;
  struct F {
    const char* key;
    double* out;
    double dflt;
  };
  for (F f : {F{"lr", &c.lr, defaultLr}, F{"momentum", &c.momentum, 0.9},
              F{"weight_decay", &c.weightDecay, defaultWd}, F{"beta1", &c.beta1, 0.9},
              F{"beta2", &c.beta2, 0.999}, F{"eps", &c.eps, 1e-8}, F{"gamma", &c.gamma, 0.1},
              F{"min_lr", &c.minLr, 0.0}}) {
    auto v = opts->getFloat(f.key, f.dflt);
    if (!v)
      return v.takeError();
    *f.out = *v;
  }
  struct I {
    const char* key;
    int64_t* out;
  };
  for (I i : {I{"nesterov", &c.nesterov}, I{"warmup", &c.warmup}, I{"total_steps", &c.totalSteps},
              I{"step_size", &c.stepSize}}) {
    auto v = opts->getInt(i.key, 0);
    if (!v)
      return v.takeError();
    *i.out = *v;
  }
  for (const std::string& what : splitPatterns(opts->getString("no_decay", ""))) {
    if (what == "bias")
      c.noDecayBias = true;
    else if (what == "norm")
      c.noDecayNorm = true;
    else
      return makeError("optimizer: no_decay takes bias and norm, got '" + what + "'");
  }
  // groups=PATTERN:lr=X:wd=Y;...
  for (const std::string& spec : splitPatterns(opts->getString("groups", ""))) {
    OptimizerConfig::Group grp;
    size_t colon = spec.find(':');
    grp.pattern = spec.substr(0, colon);
    if (grp.pattern.empty())
      return makeError("optimizer: the parameter group '" + spec + "' has no pattern");
    while (colon != std::string::npos) {
      size_t next = spec.find(':', colon + 1);
      std::string item =
          spec.substr(colon + 1, next == std::string::npos ? next : next - colon - 1);
      colon = next;
      size_t eq = item.find('=');
      std::string key = item.substr(0, eq);
      double* out = key == "lr" ? &grp.lrScale : key == "wd" ? &grp.decay : nullptr;
      char* end = nullptr;
      std::string text = eq == std::string::npos ? "" : item.substr(eq + 1);
      double value = text.empty() ? -1 : std::strtod(text.c_str(), &end);
      if (!out || text.empty() || *end != '\0' || !(value >= 0))
        return makeError("optimizer: the parameter group '" + spec +
                         "' takes lr=X (an lr multiplier) and wd=Y (a weight decay), each >= 0");
      *out = value;
    }
    c.groups.push_back(grp);
  }
  c.schedule = opts->getString("schedule", "constant");
  if (!(c.lr > 0))
    return makeError("optimizer: lr must be > 0");
  if (c.schedule != "constant" && c.schedule != "step" && c.schedule != "cosine")
    return makeError("optimizer: unknown schedule '" + c.schedule +
                     "' (expected constant, step or cosine)");
  if (c.schedule == "step" && c.stepSize < 1)
    return makeError("optimizer: a step schedule needs step_size >= 1");
  if (c.schedule == "cosine" && c.totalSteps < 1)
    return makeError("optimizer: a cosine schedule needs total_steps >= 1");
  if (c.warmup < 0)
    return makeError("optimizer: warmup must be >= 0");
  return std::make_unique<OptimizerPass>(c);
}

} // namespace lwcc
