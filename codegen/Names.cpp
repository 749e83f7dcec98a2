//===- Names.cpp - The C identifiers of a generated trainer ---------------===//
#include "codegen/Names.h"

#include "ir/OpTable.h"

#include <algorithm>
#include <cctype>

namespace lwcc::codegen {

namespace {

/// Identifiers a view must not shadow or be: C++'s keywords, the names the
/// generated functions use (their parameters, the view helper, the runtime
/// namespaces) and every runtime function a call names (fused forms too).
const std::set<std::string>& reservedNames() {
  static const std::set<std::string> names = [] {
    std::set<std::string> s = {
        "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
        "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
        "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
        "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
        "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
        "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
        "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
        "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
        "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
        "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
        "virtual", "void", "volatile", "wchar_t", "while",
        // The generated functions' own names.
        "at", "b", "h", "failed", "range", "std", "lwrt", "cpu", "cuda", "int64_t", "size_t",
        "main"};
    for (const OpInfo& info : allOps())
      if (info.kernel.fn) {
        s.insert(info.kernel.fn);
        s.insert(std::string(info.kernel.fn) + "Act");
      }
    return s;
  }();
  return names;
}

/// Whether `s` may collide with what the source already names: reserved,
/// or spelled like a type (Capitalized, one word), a macro (no lower-case
/// letter) or a constant of the source (kName).
bool clashes(const std::string& s) {
  if (reservedNames().count(s))
    return true;
  const auto upper = [](char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; };
  const auto lower = [](char c) { return std::islower(static_cast<unsigned char>(c)) != 0; };
  if (upper(s[0]) && s.find('_') == std::string::npos)
    return true;
  if (std::none_of(s.begin(), s.end(), lower))
    return true;
  return s.size() > 1 && s[0] == 'k' &&
         (upper(s[1]) || std::isdigit(static_cast<unsigned char>(s[1])));
}

bool allDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

/// What to call `v` before it is made a unique identifier.
std::string baseName(const Value* v, bool devices) {
  std::string name = v->name();
  if (name.empty() && v->kind() == ValueKind::Param)
    name = v->paramName();
  if (!allDigits(name) && !identifier(name).empty())
    return identifier(name);
  const Op* op = v->definingOp();
  if (!op)
    return v->kind() == ValueKind::Input ? "input" : "param";
  // An update's result that is assigned to a param: the param's new value.
  if (v->uses().size() == 1) {
    const Op* user = v->uses().front().user;
    if (user && user->kind() == OpKind::Assign && user->operand(1) == v && user->operand(0) != v)
      return baseName(user->operand(0), devices) + "_new";
  }
  // After the ONNX node the op comes from (a backward op keeps its forward
  // node's name) and the op.
  std::string node = identifier(op->loc().name);
  std::string out = (node.empty() ? "" : node + "_") + std::string(op->mnemonic());
  if (node.empty())
    out += "_out";
  // Appended piece by piece: GCC 12's -Wrestrict misfires on `out += "_" +
  // std::to_string(...)` at -O3.
  if (v->resultIndex() > 0)
    out.append("_").append(std::to_string(v->resultIndex()));
  if (op->annotations().microBatch)
    out.append("_mb").append(std::to_string(*op->annotations().microBatch));
  if (devices)
    out.append("_d").append(std::to_string(valueDevice(v).value_or(0)));
  return out;
}

} // namespace

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_')
    out.pop_back();
  return out;
}

const Names::Entry& Names::entry(const Value* v) {
  auto it = names_.find(v);
  if (it != names_.end())
    return it->second;
  std::string base = baseName(v, devices_);
  if (std::isdigit(static_cast<unsigned char>(base[0])) || clashes(base))
    base = "v_" + base;
  const auto free = [&](const std::string& s) { return !used_.count(s) && !taken_.count(s); };
  std::string local = base;
  for (int k = 2; !free(local) || !free(prefix_ + local + "_off"); ++k) {
    local = base;
    local.append("_").append(std::to_string(k));
  }
  std::string offset = prefix_ + local + "_off";
  used_.insert(local);
  used_.insert(offset);
  taken_.insert(offset);
  return names_.emplace(v, Entry{local, offset}).first->second;
}

std::string ShapeNames::operator()(const std::vector<int64_t>& shape) {
  auto it = names_.find(shape);
  if (it != names_.end())
    return it->second;
  std::string name = shape.empty() ? "kScalar" : "kShape";
  for (size_t i = 0; i < shape.size(); ++i)
    name.append(i ? "x" : "").append(std::to_string(shape[i]));
  return names_.emplace(shape, name).first->second;
}

std::string ShapeNames::definitions(const std::string& prefix) const {
  std::string out;
  for (const auto& [shape, name] : names_) {
    out += prefix + "const Shape " + name + " = {";
    for (size_t i = 0; i < shape.size(); ++i)
      out += (i ? ", " : "") + std::to_string(shape[i]);
    out += "};\n";
  }
  return out;
}

} // namespace lwcc::codegen
