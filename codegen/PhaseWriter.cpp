//===- PhaseWriter.cpp - Generated functions from IR ops ------------------===//
#include "codegen/PhaseWriter.h"

#include "ir/FusedOps.h"
#include "ir/Printer.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>

namespace lwcc::codegen {

namespace {

/// Whether `op` runs on `device`, or takes part there (a communication op
/// with `device` among its devices, src or dst).
bool onDevice(const Op& op, int64_t device) { return devicesOf(op).count(device) > 0; }

/// The label a failed call reports: the op's ONNX node, else its mnemonic.
std::string labelOf(const Op& op) {
  return cString(op.loc().name.empty() ? std::string(op.mnemonic()) : op.loc().name);
}

} // namespace

std::string cString(const std::string& s) { return quoteString(s); }

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
  if (op.annotations().microBatch)
    text += " @mb(" + std::to_string(*op.annotations().microBatch) + ")";
  return text;
}

llvm::Expected<HyperDefaults> hyperDefaults(const Graph& g) {
  HyperDefaults d;
  const Op *update = nullptr, *schedule = nullptr, *xent = nullptr, *clip = nullptr;
  for (const auto& op : g.ops()) {
    if (op->kind() == OpKind::ClipCoef) {
      if (clip && clip->getFloat("max_norm") != op->getFloat("max_norm"))
        return op->emitError("codegen: the clip_coef ops differ in max_norm");
      clip = op.get();
    }
    if (op->kind() == OpKind::SoftmaxXent || op->kind() == OpKind::SoftmaxXentGrad) {
      if (xent && xent->getFloat("label_smoothing") != op->getFloat("label_smoothing"))
        return op->emitError("codegen: the softmax_xent ops differ in label_smoothing");
      xent = op.get();
    }
    if (op->kind() == OpKind::SgdUpdate || op->kind() == OpKind::AdamUpdate) {
      // Parameter groups differ in lr_scale and group_decay only.
      auto shared = [](const Op* o) {
        auto a = o->attrs();
        a.erase(std::remove_if(a.begin(), a.end(),
                               [](const NamedAttr& n) {
                                 return n.name == "lr_scale" || n.name == "group_decay";
                               }),
                a.end());
        return a;
      };
      if (update && (update->kind() != op->kind() || shared(update) != shared(op.get())))
        return op->emitError("codegen: the update ops do not share one optimizer's settings");
      update = op.get();
    } else if (op->kind() == OpKind::LrSchedule) {
      if (schedule && schedule->attrs() != op->attrs())
        return op->emitError("codegen: the lr_schedule ops differ");
      schedule = op.get();
    }
  }
  std::ostringstream f;
  if (update && update->kind() == OpKind::SgdUpdate) {
    d.family = "Hyper::Sgd";
    f << "  model.defaults.momentum = " << num(update->getFloat("momentum")) << ";\n"
      << "  model.defaults.weightDecay = " << num(update->getFloat("weight_decay")) << ";\n"
      << "  model.defaults.nesterov = " << update->getInt("nesterov") << ";\n";
  } else if (update) {
    d.family = "Hyper::Adam";
    f << "  model.defaults.beta1 = " << num(update->getFloat("beta1")) << ";\n"
      << "  model.defaults.beta2 = " << num(update->getFloat("beta2")) << ";\n"
      << "  model.defaults.epsilon = " << num(update->getFloat("epsilon")) << ";\n"
      << "  model.defaults.weightDecay = " << num(update->getFloat("weight_decay")) << ";\n"
      << "  model.defaults.decoupled = " << update->getInt("decoupled") << ";\n";
  }
  if (schedule) {
    const std::string& k = schedule->getString("kind");
    f << "  model.defaults.lr = " << num(schedule->getFloat("base_lr")) << ";\n"
      << "  model.defaults.schedule = "
      << (k == "step"     ? 1
          : k == "cosine" ? 2
                          : 0)
      << ";\n"
      << "  model.defaults.warmupSteps = " << schedule->getInt("warmup_steps") << ";\n"
      << "  model.defaults.totalSteps = " << schedule->getInt("total_steps") << ";\n"
      << "  model.defaults.stepSize = " << schedule->getInt("step_size") << ";\n"
      << "  model.defaults.gamma = " << num(schedule->getFloat("gamma")) << ";\n"
      << "  model.defaults.minLr = " << num(schedule->getFloat("min_lr")) << ";\n";
  }
  if (xent)
    f << "  model.defaults.labelSmoothing = " << num(xent->getFloat("label_smoothing")) << ";\n";
  if (clip)
    f << "  model.defaults.clipGradNorm = " << num(clip->getFloat("max_norm")) << ";\n";
  d.fields = f.str();
  return d;
}

std::string PhaseWriter::views(const std::set<const Value*>& used) {
  std::ostringstream out;
  auto declare = [&](const Value* v) {
    if (!used.count(v))
      return;
    if (auto it = inputRows_.find(v); it != inputRows_.end()) {
      // The rows this device holds, at their place in its input buffer
      // (each device its own: no shared offset constant).
      std::vector<int64_t> rows = v->type().shape;
      rows[0] = it->second.end - it->second.begin;
      out << "  const TensorView " << names_(v) << " = at(" << where_.at(v).first << ", "
          << it->second.offset << ", " << dtypeEnum(v->type().dtype) << ", " << shapes_(rows)
          << ");\n";
      return;
    }
    declared_.insert(v);
    out << "  const TensorView " << names_(v) << " = at(" << where_.at(v).first << ", "
        << names_.offset(v) << ", " << dtypeEnum(v->type().dtype) << ", "
        << shapes_(v->type().shape) << (blocked_.count(v) ? ", Layout::NChw8c" : "") << ");\n";
  };
  for (const auto& in : g_.inputs())
    declare(in.get());
  for (const auto& p : g_.params())
    declare(p.get());
  for (const auto& op : g_.ops())
    for (unsigned r = 0; r < op->numResults(); ++r)
      declare(op->result(r));
  return out.str();
}

std::map<std::pair<std::string, int64_t>, std::string> PhaseWriter::leafConstants() {
  std::map<std::pair<std::string, int64_t>, std::string> named;
  for (const auto& in : g_.inputs())
    if (declared_.count(in.get()))
      named.emplace(where_.at(in.get()), names_.offset(in.get()));
  for (const auto& p : g_.params())
    if (declared_.count(p.get()))
      named.emplace(where_.at(p.get()), names_.offset(p.get()));
  return named;
}

std::string
PhaseWriter::offsetConstants(const std::string& region, std::set<const Value*>& written,
                             const std::map<std::pair<std::string, int64_t>, std::string>* same) {
  std::ostringstream out;
  auto define = [&](const Value* v) {
    if (!declared_.count(v) || written.count(v) || where_.at(v).first != region)
      return;
    out << "constexpr int64_t " << names_.offset(v) << " = ";
    // An update written over its param: the param's bytes, by name.
    const Op* user = v->uses().size() == 1 ? v->uses().front().user : nullptr;
    const std::string* sameBytes = nullptr;
    if (same) {
      auto it = same->find(where_.at(v));
      sameBytes = it != same->end() ? &it->second : nullptr;
    }
    if (user && user->kind() == OpKind::Assign && user->operand(1) == v &&
        written.count(user->operand(0)) && where_.at(user->operand(0)) == where_.at(v))
      out << names_.offset(user->operand(0)) << ";\n";
    else if (sameBytes)
      out << *sameBytes << ";\n";
    else
      out << where_.at(v).second << ";\n";
    written.insert(v);
  };
  for (const auto& in : g_.inputs())
    define(in.get());
  for (const auto& p : g_.params())
    define(p.get());
  for (const auto& op : g_.ops())
    for (unsigned r = 0; r < op->numResults(); ++r)
      define(op->result(r));
  return out.str();
}

llvm::Error PhaseWriter::write(GraphCode& code, const std::function<size_t(size_t)>& phaseOf) {
  {
    std::vector<const Op*> order;
    std::vector<size_t> phases;
    size_t i = 0;
    for (const auto& op : g_.ops()) {
      if (op->kind() != OpKind::Constant) {
        order.push_back(op.get());
        phases.push_back(phaseOf(i));
      }
      ++i;
    }
    planFusions(order, [&](size_t k) { return phases[k] == phases[k + 1]; });
    planUpdateGroups(order, [&](size_t k) { return phases[k] == phases[k + 1]; });
  }
  size_t index = 0;
  for (const auto& opPtr : g_.ops()) {
    const Op& op = *opPtr;
    ++index;
    if (op.annotations().stream.value_or(0) != 0 || op.info().isEvent())
      return op.emitError("codegen: a step of several streams is written one function per "
                          "stream");
    Phase* phase = &code.init;
    if (op.kind() != OpKind::Constant) {
      size_t k = phaseOf(index - 1);
      if (code.phases.size() <= k)
        code.phases.resize(k + 1);
      phase = &code.phases[k];
    }
    if (llvm::Error e = writeOp(*phase, op, 0, nullptr))
      return e;
  }
  return llvm::Error::success();
}

llvm::Error PhaseWriter::writeDevice(DeviceCode& code, int64_t device,
                                     const std::map<const Op*, int>& commIds) {
  {
    // Each stream's ops in the order written: a fusion never spans an
    // event (a wait before the activation, or a record after the
    // producer, orders the two calls against another stream).
    std::map<int64_t, std::vector<const Op*>> orders;
    for (const auto& op : g_.ops())
      if (op->kind() != OpKind::Constant && onDevice(*op, device))
        orders[op->annotations().stream.value_or(0)].push_back(op.get());
    for (const auto& [s, order] : orders) {
      planFusions(order, [&order = order](size_t k) {
        return !order[k]->info().isEvent() && !order[k + 1]->info().isEvent();
      });
      planUpdateGroups(order, [](size_t) { return true; });
    }
  }
  code.streams[0];
  for (const auto& opPtr : g_.ops()) {
    const Op& op = *opPtr;
    if (!onDevice(op, device))
      continue;
    const int64_t stream = op.annotations().stream.value_or(0);
    Phase& phase = op.kind() == OpKind::Constant ? code.init : code.streams[stream];
    if (llvm::Error e = writeOp(phase, op, device, &commIds))
      return e;
  }
  return llvm::Error::success();
}

llvm::Error PhaseWriter::writeOp(Phase& phase, const Op& op, int64_t device,
                                 const std::map<const Op*, int>* commIds) {
  Phase::OpCode code;
  std::ostringstream out;
  auto done = [&] {
    code.text = out.str();
    phase.ops.push_back(std::move(code));
    return llvm::Error::success();
  };
  const std::string label = labelOf(op);
  if (op.info().isEvent()) {
    auto call = callOf(op);
    if (!call)
      return call.takeError();
    out << "\n  // " << op.mnemonic() << " event " << op.getInt("event")
        << (op.kind() == OpKind::Wait ? ": the ops below run after its record\n"
                                      : ": the ops above have run\n")
        << "  CHECK_OP(" << *call << ", " << label << ");\n";
    return done();
  }
  for (const Value* v : op.operands())
    if (where_.count(v))
      code.used.insert(v);
  for (unsigned r = 0; r < op.numResults(); ++r)
    if (where_.count(op.result(r)))
      code.used.insert(op.result(r));
  // A fused call also writes its activation's result (the activation's own
  // code is only a note, perhaps in another function of a long phase).
  if (auto f = fusedInto_.find(&op); f != fusedInto_.end()) {
    for (unsigned r = 0; r < f->second->numResults(); ++r)
      if (where_.count(f->second->result(r)))
        code.used.insert(f->second->result(r));
    if (const Value* residual = epilogueResidual(*f->second, op.result(0)))
      code.used.insert(residual);
  }
  // A batch norm backward fused with its relu_grad reads the latter's
  // operands; an update, its clipping product's.
  if (auto g = gradPrologues_.find(&op); g != gradPrologues_.end())
    for (const Value* v : g->second->operands())
      code.used.insert(v);
  if (auto g = gradScales_.find(&op); g != gradScales_.end())
    for (const Value* v : g->second->operands())
      code.used.insert(v);
  code.hyper = !hyperParams(op).empty();
  out << "\n  // " << statement(op, names_) << "\n";
  if (inRun_.count(&op)) {
    out << "  // (computed by the multi-tensor call above)\n"
        << "  MARK_OP(" << cString(std::string(op.mnemonic())) << ", " << label << ");\n";
    code.used.clear();
    code.hyper = false;
    return done();
  }
  if (auto run = updateRuns_.find(&op); run != updateRuns_.end()) {
    for (const Op* u : run->second) {
      for (const Value* v : u->operands())
        code.used.insert(v);
      if (auto g = gradScales_.find(u); g != gradScales_.end())
        for (const Value* v : g->second->operands())
          code.used.insert(v);
      for (unsigned r = 0; r < u->numResults(); ++r)
        code.used.insert(u->result(r));
    }
    out << "  // and the " << run->second.size() - 1 << " "
        << (op.kind() == OpKind::Cast ? "casts" : "updates")
        << " after it: one multi-tensor call over them\n";
    out << "  RUN_OP(" << groupCallOf(run->second) << ", " << cString(std::string(op.mnemonic()))
        << ", " << labelOf(op) << ");\n";
    // The CUDA runtime launches once per kMultiTensorPerLaunch tensors
    // (Fusions::Cuda is CUDA's writer): --profile counts each launch.
    const auto launches = (static_cast<int64_t>(run->second.size()) + kMultiTensorPerLaunch - 1) /
                          kMultiTensorPerLaunch;
    if (fusions_ == Fusions::Cuda && launches > 1)
      out << "  if (b.calls)\n    *b.calls += " << launches - 1 << ";\n";
    return done();
  }
  auto call = commIds && op.info().isCommunication() ? commCallOf(op, device, commIds->at(&op))
                                                     : callOf(op);
  if (!call)
    return call.takeError();
  if (nothingToDo(out, op, *call))
    return done();
  const std::string mnemonic = cString(std::string(op.mnemonic()));
  if (fused(out, op, *call))
    out << "  MARK_OP(" << mnemonic << ", " << label << ");\n";
  else if (op.kind() == OpKind::Constant)
    out << "  CHECK_OP(" << *call << ", " << label << ");\n";
  else
    out << "  RUN_OP(" << *call << ", " << mnemonic << ", " << label << ");\n";
  return done();
}

bool PhaseWriter::nothingToDo(std::ostringstream& out, const Op& op, const std::string& call) {
  if (!call.empty())
    return false;
  if (op.kind() == OpKind::Assign)
    out << "  // (" << names_(op.operand(1)) << " was written in place over "
        << names_(op.operand(0)) << ": nothing to copy)\n";
  else
    out << "  // (a view of " << names_(op.operand(0)) << ": same bytes, nothing to do)\n";
  return true;
}

llvm::Expected<std::string> PhaseWriter::commCallOf(const Op& op, int64_t device, int id) {
  std::vector<int64_t> devices =
      op.hasAttr("devices") ? op.getInts("devices") : std::vector<int64_t>{};
  int64_t i = -1; // this device's position in `devices`
  for (size_t k = 0; k < devices.size(); ++k)
    if (devices[k] == device) {
      if (i >= 0)
        return op.emitError("codegen: device " + std::to_string(device) +
                            " appears twice in the op's devices");
      i = static_cast<int64_t>(k);
    }
  const unsigned p = static_cast<unsigned>(devices.size());
  auto ref = [&](bool mine, const Value* v) {
    return mine ? "&" + names_(v) : std::string("nullptr");
  };
  auto sizesAlong = [&](int64_t axis, bool operands) {
    std::vector<int64_t> sizes;
    unsigned n = operands ? op.numOperands() : op.numResults();
    for (unsigned k = 0; k < n; ++k)
      sizes.push_back((operands ? op.operand(k) : op.result(k))->type().shape[axis]);
    return sizes;
  };
  std::string head = std::string(op.info().kernel.fn ? op.info().kernel.fn : "?") + "(b, " +
                     std::to_string(id) + ", ";
  const unsigned at = static_cast<unsigned>(std::max<int64_t>(i, 0));
  switch (op.kind()) {
  case OpKind::AllReduce: {
    std::string in = "{", out = "{";
    for (unsigned t = 0; t < op.numOperands() / p; ++t) {
      in += (t ? ", " : "") + names_(op.operand(t * p + at));
      out += (t ? ", " : "") + names_(op.result(t * p + at));
    }
    return head + ints(devices) + ", " + in + "}, " + out + "})";
  }
  case OpKind::AllGather: {
    int64_t axis = op.getInt("axis");
    return head + ints(devices) + ", " + std::to_string(axis) + ", " +
           ints(sizesAlong(axis, true)) + ", " + names_(op.operand(at)) + ", " +
           names_(op.result(at)) + ")";
  }
  case OpKind::ReduceScatter: {
    int64_t axis = op.getInt("axis");
    return head + ints(devices) + ", " + std::to_string(axis) + ", " + ints(op.getInts("sizes")) +
           ", " + names_(op.operand(at)) + ", " + names_(op.result(at)) + ")";
  }
  case OpKind::Broadcast: {
    int64_t src = op.getInt("src");
    return head + std::to_string(src) + ", " + ints(devices) + ", " +
           ref(device == src, op.operand(0)) + ", " + ref(i >= 0, op.result(at)) + ")";
  }
  case OpKind::ReduceTo: {
    int64_t dst = op.getInt("dst");
    return head + ints(devices) + ", " + std::to_string(dst) + ", " + ref(i >= 0, op.operand(at)) +
           ", " + ref(device == dst, op.result(0)) + ")";
  }
  case OpKind::DeviceCopy: {
    int64_t src = op.getInt("src"), dst = op.getInt("dst");
    return head + std::to_string(src) + ", " + std::to_string(dst) + ", " +
           ref(device == src, op.operand(0)) + ", " + ref(device == dst, op.result(0)) + ")";
  }
  case OpKind::Shard: {
    int64_t src = op.getInt("src"), axis = op.getInt("axis");
    return head + std::to_string(src) + ", " + ints(devices) + ", " + std::to_string(axis) + ", " +
           ints(op.getInts("sizes")) + ", " + ref(device == src, op.operand(0)) + ", " +
           ref(i >= 0, op.result(at)) + ")";
  }
  case OpKind::Unshard: {
    int64_t dst = op.getInt("dst"), axis = op.getInt("axis");
    return head + ints(devices) + ", " + std::to_string(dst) + ", " + std::to_string(axis) + ", " +
           ints(sizesAlong(axis, true)) + ", " + ref(i >= 0, op.operand(at)) + ", " +
           ref(device == dst, op.result(0)) + ")";
  }
  default:
    return op.emitError("codegen: no runtime call for this communication op");
  }
}

std::string PhaseWriter::withGradScale(const Op& update, std::string params) {
  auto g = gradScales_.find(&update);
  if (g == gradScales_.end() || params.empty() || params.back() != '}')
    return params;
  params.insert(params.size() - 1, ", " + names_(g->second->operand(1)) + ".data");
  return params;
}

llvm::Expected<std::string> PhaseWriter::callOf(const Op& op) {
  auto list = [&](const std::vector<const Value*>& vs) {
    std::string s = "{";
    for (size_t i = 0; i < vs.size(); ++i)
      s += (i ? ", " : "") + names_(vs[i]);
    return s + "}";
  };
  const KernelSpec& k = op.info().kernel;
  auto formatter = paramsFormatters().find(op.kind());
  auto params = [&]() -> std::string {
    std::string h = withGradScale(op, hyperParams(op));
    if (!h.empty())
      return h;
    if (op.kind() == OpKind::Slice)
      if (auto it = inputRows_.find(op.operand(0)); it != inputRows_.end() && it->second.begin)
        return sliceRowsP(op, it->second.begin); // the rows held start there

    return formatter == paramsFormatters().end() ? "" : formatter->second(op);
  };
  const std::string fn = k.fn ? k.fn : "";
  switch (k.args) {
  case KernelSpec::Fill: {
    std::vector<double> fv;
    std::vector<int64_t> iv;
    if (op.hasAttr("value"))
      fv = op.getFloats("value");
    if (op.hasAttr("ivalue"))
      iv = op.getInts("ivalue");
    return fn + "(" + names_(op.result()) + ", FillParams{" + floats(fv) + ", " + ints(iv) + "})";
  }
  case KernelSpec::Assign:
    // An update written over its param leaves nothing to copy.
    if (where_.at(op.operand(0)) == where_.at(op.operand(1)))
      return std::string();
    return fn + "(" + names_(op.operand(1)) + ", " + names_(op.operand(0)) + ")";
  case KernelSpec::OperandList: {
    std::vector<const Value*> xs(op.operands().begin(), op.operands().end());
    return fn + "(" + list(xs) + ", " + names_(op.result()) + ", " + params() + ")";
  }
  case KernelSpec::ResultList: {
    std::vector<const Value*> rs;
    for (unsigned r = 0; r < op.numResults(); ++r)
      rs.push_back(op.result(r));
    return fn + "(" + names_(op.operand(0)) + ", " + list(rs) + ", " + params() + ")";
  }
  case KernelSpec::Plain:
  case KernelSpec::OptionalLast:
    break;
  case KernelSpec::Comm:
    return op.emitError("codegen: a communication op in a one-device step");
  case KernelSpec::Event:
    return fn + "(b, " + std::to_string(op.getInt("event")) + ")";
  case KernelSpec::Generated: {
    if (!fusedKernels_)
      return op.emitError("codegen: no kernel written for this fused op");
    std::string call = fusedKernels_->name(op) + "(";
    for (unsigned i = 0; i < op.numOperands(); ++i)
      call += (i ? ", " : "") + names_(op.operand(i));
    for (unsigned r = 0; r < op.numResults(); ++r)
      call += ", " + names_(op.result(r));
    return call + ")";
  }
  }
  if (fn.empty() || formatter == paramsFormatters().end())
    return op.emitError("codegen: no runtime kernel for this op");
  // A view whose result shares its operand's bytes needs no copy.
  if (fn == "copy" && where_.at(op.operand(0)) == where_.at(op.result()))
    return std::string();
  std::vector<std::string> args;
  unsigned fixed = op.info().minOperands;
  const bool optionalLast = k.args == KernelSpec::OptionalLast;
  for (unsigned i = 0; i < op.numOperands(); ++i) {
    // A batch norm backward fused with its relu_grad reads the latter's
    // (y, dy) in place of the masked dy.
    if (prologue_ && op.operand(i) == prologue_->result()) {
      args.push_back(names_(prologue_->operand(0)));
      args.push_back(names_(prologue_->operand(1)));
      continue;
    }
    // An update that takes in its clipping product reads the gradient.
    if (auto g = gradScales_.find(&op); g != gradScales_.end() && i == 1) {
      args.push_back(names_(g->second->operand(0)));
      continue;
    }
    args.push_back((optionalLast && i >= fixed ? "&" : "") + names_(op.operand(i)));
  }
  if (optionalLast && op.numOperands() == fixed)
    args.push_back("nullptr");
  // A fused call writes its activation's result in place of its first,
  // and takes the activation last.
  for (unsigned r = 0; r < op.numResults(); ++r)
    args.push_back(names_(r == 0 && fusion_ ? fusion_->result() : op.result(r)));
  std::string p = params();
  if (!p.empty())
    args.push_back(p);
  if (fusion_ || prologue_)
    args.push_back(fusion_ && fusion_->kind() == OpKind::Clip
                       ? "Activation{Activation::Clip, " + num(fusion_->getFloat("min")) + ", " +
                             num(fusion_->getFloat("max")) + "}"
                       : std::string("Activation{Activation::Relu}"));
  // A batch norm's residual add before its relu (epilogueResidual).
  if (fusion_)
    if (const Value* residual = epilogueResidual(*fusion_, op.result(0)))
      args.push_back("&" + names_(residual));
  std::string call = fn + (fusion_ || prologue_ ? "Act(" : "(");
  for (size_t i = 0; i < args.size(); ++i)
    call += (i ? ", " : "") + args[i];
  return call + ")";
}

std::vector<PhaseWriter::Access> PhaseWriter::accessesOf(const Op& op) const {
  std::vector<Access> out;
  auto add = [&](const Value* v) {
    auto it = where_.find(v);
    if (it == where_.end())
      return; // another device's value (a communication op's other end)
    const auto& [region, offset] = it->second;
    out.push_back({region, offset, offset + v->type().sizeInBytes()});
  };
  for (const Value* v : op.operands())
    add(v);
  for (unsigned r = 0; r < op.numResults(); ++r)
    add(op.result(r));
  return out;
}

void PhaseWriter::planUpdateGroups(const std::vector<const Op*>& order,
                                   const std::function<bool(size_t)>& adjacent) {
  // An assign between updates copies nothing where the update is written
  // over its param.
  auto inPlace = [&](const Op* op) {
    return op->kind() == OpKind::Assign && where_.count(op->operand(0)) &&
           where_.count(op->operand(1)) && where_.at(op->operand(0)) == where_.at(op->operand(1));
  };
  for (size_t k = 0; k < order.size() && fuseCalls_; ++k) {
    const Op* first = order[k];
    if (!inMultiTensorCall(*first) || blocked_.count(first->result()))
      continue;
    std::vector<const Op*> run{first};
    size_t j = k;
    while (j + 1 < order.size() && adjacent(j)) {
      const Op* next = order[j + 1];
      if (first->kind() != OpKind::Cast && inPlace(next)) {
        ++j;
        continue;
      }
      if (!sameMultiTensorCall(*first, *next) || blocked_.count(next->result()))
        break;
      run.push_back(next);
      ++j;
    }
    if (run.size() >= 2) {
      updateRuns_[first] = run;
      inRun_.insert(run.begin() + 1, run.end());
    }
    k = j;
  }
}

std::string PhaseWriter::groupCallOf(const std::vector<const Op*>& run) {
  if (run.front()->kind() == OpKind::Cast) {
    std::string call = "castGroup({";
    for (size_t k = 0; k < run.size(); ++k)
      call += (k ? ",\n      CastPair{" : "\n      CastPair{") + names_(run[k]->operand(0)) + ", " +
              names_(run[k]->result()) + "}";
    return call + "})";
  }
  const bool sgd = run.front()->kind() == OpKind::SgdUpdate;
  std::string call = sgd ? "sgdUpdateGroup({" : "adamUpdateGroup({";
  for (size_t k = 0; k < run.size(); ++k) {
    const Op& u = *run[k];
    call += k ? ",\n      " : "\n      ";
    call += sgd ? "SgdSlot{" : "AdamSlot{";
    const unsigned tensors = sgd ? 3 : 4; // w, g, m (, v)
    const auto scaled = gradScales_.find(&u);
    for (unsigned i = 0; i < tensors; ++i)
      call += names_(i == 1 && scaled != gradScales_.end() ? scaled->second->operand(0)
                                                           : u.operand(i)) +
              ", ";
    for (unsigned r = 0; r < u.numResults(); ++r)
      call += names_(u.result(r)) + ", ";
    call += withGradScale(u, hyperParams(u)) + "}";
  }
  call += "}, " + names_(run.front()->operand(sgd ? 3 : 4));
  if (!sgd)
    call += ", " + names_(run.front()->operand(5));
  // fp16's `finite` flag, one for the run (sameMultiTensorCall).
  const unsigned flag = sgd ? 4 : 6;
  if (run.front()->numOperands() > flag)
    call += ", &" + names_(run.front()->operand(flag));
  return call + ")";
}

void PhaseWriter::planFusions(const std::vector<const Op*>& order,
                              const std::function<bool(size_t)>& adjacent) {
  if (fusions_ == Fusions::None)
    return;
  const bool cuda = fusions_ == Fusions::Cuda;
  std::map<const Op*, size_t> at;
  for (size_t k = 0; k < order.size(); ++k)
    at[order[k]] = k;
  for (size_t k = 0; k + 1 < order.size(); ++k) {
    const Op* producer = order[k];
    const Op* relu = epilogueOf(*producer, cuda, fuseCalls_);
    auto it = relu ? at.find(relu) : at.end();
    if (it == at.end() || it->second <= k || !where_.count(relu->result()))
      continue;
    const Value* v = producer->result(0);
    // cuDNN's fused convolution writes its relu in place.
    if (cuda && producer->kind() == OpKind::Conv2d &&
        (!where_.count(v) || where_.at(v) != where_.at(relu->result())))
      continue;
    // The ops between touch neither the activation's result (written
    // early) nor the residual a batch norm adds (read early).
    // A residual the call adds is written before it (of a region adding
    // two batch norms, the later one takes it).
    std::vector<const Value*> early{relu->result()};
    if (const Value* residual = epilogueResidual(*relu, v)) {
      const Op* def = residual->definingOp();
      if (!where_.count(residual) || (def && at.count(def) && at.at(def) > k))
        continue;
      early.push_back(residual);
    }
    const size_t r = it->second;
    bool clear = true;
    for (size_t j = k; j < r && clear; ++j) {
      clear = adjacent(j);
      if (j > k)
        for (const Access& a : accessesOf(*order[j]))
          for (const Value* e : early) {
            const auto& [region, offset] = where_.at(e);
            clear &= !(a.region == region && a.begin < offset + e->type().sizeInBytes() &&
                       offset < a.end);
          }
    }
    if (!clear)
      continue;
    fusedInto_[producer] = relu;
    fusedFrom_.insert(relu);
  }
  // Gradient clipping's products the updates take in (gradScaleOf): the
  // update reads the gradient and the factor; no mul is written.
  for (const Op* op : order)
    if (const Op* mul = fuseCalls_ ? gradScaleOf(*op) : nullptr;
        mul && at.count(mul) && where_.count(mul->operand(0)) && where_.count(mul->operand(1))) {
      gradScales_[op] = mul;
      fusedFrom_.insert(mul);
    }
  // A relu_grad written right before the batch norm backward that alone
  // reads it: one call (batchNormGradAct) at the backward's place.
  for (size_t r = 1; r < order.size() && fuseCalls_; ++r) {
    const Op* rg = gradPrologueOf(*order[r]);
    if (!rg || order[r - 1] != rg || !adjacent(r - 1) || !where_.count(rg->operand(0)) ||
        !where_.count(rg->operand(1)))
      continue;
    gradPrologues_[order[r]] = rg;
    fusedFrom_.insert(rg);
  }
}

bool PhaseWriter::fused(std::ostringstream& out, const Op& op, std::string& call) {
  if (fusedFrom_.count(&op)) {
    out << (op.kind() == OpKind::ReluGrad ? "  // (computed by the fused call below)\n"
            : op.kind() == OpKind::Mul    ? "  // (the update below reads the gradient and "
                                            "the factor)\n"
                                          : "  // (computed by the fused call above)\n");
    return true;
  }
  auto it = fusedInto_.find(&op);
  auto g = gradPrologues_.find(&op);
  if (it != fusedInto_.end() || g != gradPrologues_.end()) {
    fusion_ = it != fusedInto_.end() ? it->second : nullptr;
    prologue_ = g != gradPrologues_.end() ? g->second : nullptr;
    auto fusedCall = callOf(op);
    fusion_ = prologue_ = nullptr;
    if (fusedCall)
      call = *fusedCall;
    else
      llvm::consumeError(fusedCall.takeError()); // the caller already wrote the plain call
  }
  return false;
}

llvm::Expected<int64_t> placeResults(const Graph& g, Places& where, const std::string& region,
                                     int64_t* classes, int64_t device) {
  int64_t arenaBytes = 0;
  for (const auto& op : g.ops()) {
    if (op->numResults() && !op->annotations().bufferOffsets)
      return op->emitError("codegen: has no @buf; run memory-plan first");
    for (unsigned r = 0; r < op->numResults(); ++r) {
      const Value* v = op->result(r);
      if (valueDevice(v).value_or(0) != device)
        continue; // another device's arena
      int64_t off = (*op->annotations().bufferOffsets)[r];
      if (off == -1) {
        // Written over the param it updates (the memory plan's kOverParam):
        // the result's only use is that param's assign.
        const Op* user = v->uses().size() == 1 ? v->uses().front().user : nullptr;
        if (!user || user->kind() != OpKind::Assign || !where.count(user->operand(0)))
          return op->emitError("codegen: @buf(-1) on a result that is not assigned to a param");
        where[v] = where.at(user->operand(0));
        continue;
      }
      where[v] = {region, off};
      arenaBytes = std::max(arenaBytes, alignUp(off + v->type().sizeInBytes()));
    }
    if (classes && op->kind() == OpKind::SoftmaxXent)
      *classes = op->operand(0)->type().shape.back();
  }
  return arenaBytes;
}

namespace {

/// An assembler string literal for a file name.
std::string asmString(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += "\\\\";
    out += c;
  }
  return out;
}

} // namespace

std::string incbin(const std::string& symbol, const std::string& file) {
  std::ostringstream os;
  os << "asm(\".section .rodata\\n.balign 64\\n.globl " << symbol << "_begin\\n"
     << symbol << "_begin:\\n.incbin \\\"" << asmString(file) << "\\\"\\n.globl " << symbol
     << "_end\\n"
     << symbol << "_end:\\n.byte 0\\n.previous\\n\");\n";
  return os.str();
}

std::string incbinSymbols(const std::string& symbol) {
  return "extern \"C\" const unsigned char " + symbol + "_begin[], " + symbol + "_end[];\n";
}

} // namespace lwcc::codegen
