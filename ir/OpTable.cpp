//===- OpTable.cpp - The op table built from Ops.def ----------------------===//
#include "ir/OpTable.h"

#include "ir/GradRules.h"

#include <limits>
#include <unordered_map>

namespace lwcc {

namespace {

std::vector<OpInfo> buildTable() {
#define INT(n, d) AttrSpec{#n, AttrKind::Int, AttrSpec::Defaulted, Attribute(int64_t(d))}
#define FLOAT(n, d)                                                                                \
  AttrSpec { #n, AttrKind::Float, AttrSpec::Defaulted, Attribute(double(d)) }
#define STR(n, d)                                                                                  \
  AttrSpec { #n, AttrKind::String, AttrSpec::Defaulted, Attribute(std::string(d)) }
#define INTS(n, ...)                                                                               \
  AttrSpec {                                                                                       \
#n, AttrKind::Ints, AttrSpec::Defaulted, Attribute(std::vector <int64_t>{__VA_ARGS__})         \
  }
#define FLOATS(n, ...)                                                                             \
  AttrSpec {                                                                                       \
#n, AttrKind::Floats, AttrSpec::Defaulted, Attribute(std::vector <double>{__VA_ARGS__})        \
  }
#define REQ_INT(n)                                                                                 \
  AttrSpec { #n, AttrKind::Int, AttrSpec::Required, Attribute() }
#define REQ_STR(n)                                                                                 \
  AttrSpec { #n, AttrKind::String, AttrSpec::Required, Attribute() }
#define REQ_INTS(n)                                                                                \
  AttrSpec { #n, AttrKind::Ints, AttrSpec::Required, Attribute() }
#define REQ_FLOATS(n)                                                                              \
  AttrSpec { #n, AttrKind::Floats, AttrSpec::Required, Attribute() }
#define OPT_INTS(n)                                                                                \
  AttrSpec { #n, AttrKind::Ints, AttrSpec::Optional, Attribute() }
#define OPT_FLOATS(n)                                                                              \
  AttrSpec { #n, AttrKind::Floats, AttrSpec::Optional, Attribute() }
#define OP(E, M, LO, HI, NR, SHAPE, VERIFY, GRAD, ...)                                             \
  OpInfo{OpKind::E, M, LO, HI, NR, std::vector<AttrSpec>{__VA_ARGS__}, SHAPE, VERIFY, GRAD},
#define COMM_OP(E, M, LO, HI, NR, SHAPE, VERIFY, GRAD, PLACE, ...)                                 \
  OpInfo{OpKind::E, M,      LO,   HI,      NR,   std::vector<AttrSpec>{__VA_ARGS__},               \
         SHAPE,     VERIFY, GRAD, nullptr, PLACE},
  std::vector<OpInfo> table{
#include "ir/Ops.def"
  };
#undef OP
#undef COMM_OP
#define TRAIT(E, FIELD, ...) table[static_cast<size_t>(OpKind::E)].FIELD = __VA_ARGS__;
  constexpr int kAny = OpInfo::kAnyOperand;
#include "ir/OpTraits.def"
#undef TRAIT
  return table;
#undef INT
#undef FLOAT
#undef STR
#undef INTS
#undef FLOATS
#undef REQ_INT
#undef REQ_INTS
#undef REQ_STR
#undef REQ_FLOATS
#undef OPT_INTS
#undef OPT_FLOATS
}

} // namespace

const std::vector<OpInfo>& allOps() {
  static const std::vector<OpInfo> table = buildTable();
  return table;
}

const OpInfo& opInfo(OpKind kind) { return allOps()[static_cast<size_t>(kind)]; }

std::optional<OpKind> lookupOpKind(std::string_view mnemonic) {
  static const std::unordered_map<std::string_view, OpKind> byName = [] {
    std::unordered_map<std::string_view, OpKind> m;
    for (const OpInfo& info : allOps())
      m.emplace(info.mnemonic, info.kind);
    return m;
  }();
  auto it = byName.find(mnemonic);
  if (it == byName.end())
    return std::nullopt;
  return it->second;
}

const AttrSpec* OpInfo::findAttr(std::string_view name) const {
  for (const AttrSpec& a : attrs)
    if (name == a.name)
      return &a;
  return nullptr;
}

} // namespace lwcc
