//===- Recipes.cpp - lwcc's fine-tuning and regularization flags ----------===//
#include "tools/lwcc/Recipes.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace lwcc::recipes {

namespace {

namespace cl = llvm::cl;

cl::OptionCategory category("lwcc training recipes");

cl::opt<double> labelSmoothing(
    "label-smoothing",
    cl::desc("Label smoothing E of the softmax cross-entropy, in [0, 1]: the target is "
             "(1-E)·onehot + E/K, as PyTorch's CrossEntropyLoss(label_smoothing=E) (default 0; "
             "the trainer's --label-smoothing overrides it)"),
    cl::init(0.0), cl::cat(category));
cl::opt<std::string>
    freeze("freeze",
           cl::desc("PATTERN[,PATTERN...]: params whose names match a glob (* and ?) are frozen: "
                    "no gradient, no optimizer state, no all-reduce, no update; a pattern that "
                    "matches no param is an error"),
           cl::cat(category));
cl::opt<bool> freezeBn("freeze-bn",
                       cl::desc("With --freeze: a batch norm whose scale and bias are frozen "
                                "stays in eval mode (its running statistics used, not updated)"),
                       cl::cat(category));

cl::opt<std::string>
    noDecay("no-decay",
            cl::desc("bias,norm: no weight decay on 1-D params (timm's rule): biases (bias), "
                     "normalization scales and shifts (norm), or both"),
            cl::cat(category));
cl::list<std::string> paramGroups(
    "param-group",
    cl::desc("PATTERN:lr=X,wd=Y (repeatable): params whose names match the glob train at lr "
             "times X with weight decay Y (either may be left out); the first matching group "
             "wins; a group that matches no param is an error"),
    cl::cat(category));

cl::opt<double> clipGradNorm(
    "clip-grad-norm",
    cl::desc("X > 0: clip the gradients by their global L2 norm before each update, as "
             "torch.nn.utils.clip_grad_norm_(params, X) (over every device; the trainer's "
             "--clip-grad-norm overrides X and logs the norm)"),
    cl::init(0.0), cl::cat(category));

std::vector<std::string> splitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos)
      end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

} // namespace

const llvm::cl::OptionCategory& optionCategory() { return category; }

int checkUsage(const std::string& loss) {
  if (!(labelSmoothing >= 0 && labelSmoothing <= 1)) {
    llvm::errs() << "lwcc: --label-smoothing must be in [0, 1]\n";
    return 2;
  }
  if (labelSmoothing != 0 && loss != "softmax-xent") {
    llvm::errs() << "lwcc: --label-smoothing needs the softmax-xent loss\n";
    return 2;
  }
  if (freeze.getNumOccurrences())
    for (const std::string& p : splitComma(freeze))
      if (p.empty() || p.find(';') != std::string::npos) {
        llvm::errs() << "lwcc: --freeze=" << freeze << ": an empty pattern or one with ';'\n";
        return 2;
      }
  for (const std::string& what : splitComma(noDecay))
    if (noDecay.getNumOccurrences() && what != "bias" && what != "norm") {
      llvm::errs() << "lwcc: --no-decay=" << noDecay << ": takes bias, norm or bias,norm\n";
      return 2;
    }
  for (const std::string& g : paramGroups) {
    size_t colon = g.find(':');
    bool ok = colon != std::string::npos && colon > 0 && g.find(';') == std::string::npos;
    for (const std::string& item :
         ok ? splitComma(g.substr(colon + 1)) : std::vector<std::string>{}) {
      size_t eq = item.find('=');
      std::string key = item.substr(0, eq);
      double value = -1;
      ok = ok && eq != std::string::npos && (key == "lr" || key == "wd") &&
           !llvm::StringRef(item).substr(eq + 1).getAsDouble(value) && value >= 0;
    }
    if (!ok) {
      llvm::errs() << "lwcc: --param-group=" << g
                   << ": expected PATTERN:lr=X,wd=Y (an lr multiplier and a weight decay, "
                      "each >= 0; either may be left out)\n";
      return 2;
    }
  }
  if (clipGradNorm.getNumOccurrences() && !(clipGradNorm > 0 && std::isfinite(clipGradNorm))) {
    llvm::errs() << "lwcc: --clip-grad-norm must be a finite number > 0\n";
    return 2;
  }
  if (freezeBn && !freeze.getNumOccurrences()) {
    llvm::errs() << "lwcc: --freeze-bn needs --freeze=PATTERN\n";
    return 2;
  }
  return 0;
}

void addTo(TrainingPipelineOptions& o) {
  o.labelSmoothing = labelSmoothing;
  if (freeze.getNumOccurrences()) {
    o.freeze = splitComma(freeze);
    o.freezeBn = freezeBn;
  }
  if (noDecay.getNumOccurrences())
    o.optimizer.noDecay = splitComma(noDecay);
  for (const std::string& g : paramGroups) {
    size_t colon = g.find(':');
    std::string spec = g.substr(0, colon);
    for (const std::string& item : splitComma(g.substr(colon + 1)))
      spec += ":" + item;
    o.optimizer.groups.push_back(spec);
  }
  if (clipGradNorm.getNumOccurrences())
    o.clipGradNorm = clipGradNorm;
}

bool clipsGradients() { return clipGradNorm.getNumOccurrences() > 0; }

} // namespace lwcc::recipes
