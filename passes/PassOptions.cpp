//===- PassOptions.cpp ----------------------------------------------------===//
#include "passes/PassOptions.h"

#include "cost/CostModel.h"
#include "ir/Diagnostics.h"

#include <algorithm>
#include <cstdlib>

namespace lwcc {

llvm::Expected<PassOptions> PassOptions::parse(std::string_view pass, std::string_view text,
                                               std::string_view mainKey,
                                               const std::vector<std::string_view>& known) {
  PassOptions opts;
  opts.pass_ = std::string(pass);
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view item =
        text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    pos = comma == std::string_view::npos ? text.size() : comma + 1;
    size_t eq = item.find('=');
    std::string key, value;
    if (eq == std::string_view::npos) {
      if (!first || mainKey.empty())
        return makeError("pass '" + opts.pass_ + "': option '" + std::string(item) +
                         "' needs a value (key=value)");
      key = std::string(mainKey);
      value = std::string(item);
    } else {
      key = std::string(item.substr(0, eq));
      value = std::string(item.substr(eq + 1));
    }
    first = false;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string list;
      for (std::string_view k : known)
        list += (list.empty() ? "" : ", ") + std::string(k);
      return makeError("pass '" + opts.pass_ + "' has no option '" + key + "'" +
                       (list.empty() ? " (it takes none)" : " (options: " + list + ")"));
    }
    opts.values_[key] = value;
  }
  return opts;
}

std::string PassOptions::getString(std::string_view key, std::string dflt) const {
  auto it = values_.find(std::string(key));
  return it == values_.end() ? dflt : it->second;
}

llvm::Expected<double> PassOptions::getFloat(std::string_view key, double dflt) const {
  auto it = values_.find(std::string(key));
  if (it == values_.end())
    return dflt;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0')
    return makeError("pass '" + pass_ + "': option '" + std::string(key) +
                     "' must be a number, got '" + it->second + "'");
  return v;
}

llvm::Expected<int64_t> PassOptions::getInt(std::string_view key, int64_t dflt) const {
  auto it = values_.find(std::string(key));
  if (it == values_.end())
    return dflt;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0')
    return makeError("pass '" + pass_ + "': option '" + std::string(key) +
                     "' must be an integer, got '" + it->second + "'");
  return v;
}

llvm::Expected<int64_t> PassOptions::getIntIn(std::string_view key, int64_t dflt, int64_t lo,
                                              int64_t hi) const {
  auto v = getInt(key, dflt);
  if (v && (*v < lo || *v > hi))
    return makeError(pass_ + ": " + std::string(key) + " must be " +
                     (hi == INT64_MAX ? ">= " + std::to_string(lo)
                                      : "in " + std::to_string(lo) + ".." + std::to_string(hi)) +
                     ", got " + std::to_string(*v));
  return v;
}

llvm::Expected<bool> PassOptions::getFlag(std::string_view key, bool dflt) const {
  auto v = getIntIn(key, dflt ? 1 : 0, 0, 1);
  if (!v)
    return v.takeError();
  return *v != 0;
}

llvm::Expected<std::string> PassOptions::getChoice(std::string_view key, std::string dflt,
                                                   const std::vector<std::string_view>& choices,
                                                   std::string_view expected) const {
  std::string v = getString(key, std::move(dflt));
  if (std::find(choices.begin(), choices.end(), v) != choices.end())
    return v;
  std::string list(expected);
  for (size_t i = 0; expected.empty() && i < choices.size(); ++i)
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(choices[i]);
  return makeError(pass_ + ": unknown " + std::string(key) + " '" + v + "' (expected " + list +
                   ")");
}

llvm::Expected<CostModel> costModelFromOptions(const PassOptions& opts) {
  auto spec = loadDeviceSpec(opts.getString("spec", "h100"));
  if (!spec)
    return spec.takeError();
  if (opts.has("devices_per_node")) { // lwcc --devices-per-node
    auto k = opts.getInt("devices_per_node", 0);
    if (!k)
      return k.takeError();
    if (*k < 1)
      return makeError("option 'devices_per_node' must be positive, got " + std::to_string(*k));
    spec->devicesPerNode = *k;
  }
  if (opts.has("devices_per_gpu")) { // lwcc --devices-per-gpu
    auto k = opts.getInt("devices_per_gpu", 1);
    if (!k)
      return k.takeError();
    if (*k < 1)
      return makeError("option 'devices_per_gpu' must be positive, got " + std::to_string(*k));
    spec->devicesPerGpu = *k;
  }
  std::optional<OpProfile> profile;
  if (opts.has("profile")) {
    auto p = loadOpProfile(opts.getString("profile", ""));
    if (!p)
      return p.takeError();
    profile = std::move(*p);
  }
  CostModel model(std::move(*spec), std::move(profile));
  // tf32: conv (default: convolutions on TF32, as trainers run them),
  // all or 1 (lwcc --tf32), off or 0 (--no-tf32).
  const std::string tf32 = opts.getString("tf32", "conv");
  if (tf32 == "conv")
    model.setTf32(CostModel::Tf32::Convolutions);
  else if (tf32 == "all" || tf32 == "1")
    model.setTf32(CostModel::Tf32::All);
  else if (tf32 == "off" || tf32 == "0")
    model.setTf32(CostModel::Tf32::Off);
  else
    return makeError("option 'tf32' must be conv, all or off, got '" + tf32 + "'");
  return model;
}

} // namespace lwcc
