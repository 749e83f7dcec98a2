//===- Attribute.h - Typed op attributes -----------------------*- C++ -*-===//
//
// An attribute is an int, a float, a string, an int list or a float list.
// Floats are stored as double; the op decides the precision it uses.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace lwcc {

enum class AttrKind : uint8_t { Int, Float, String, Ints, Floats };

std::string_view attrKindName(AttrKind k);

class Attribute {
public:
  using Storage =
      std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

  Attribute() : v_(int64_t{0}) {}
  Attribute(int64_t i) : v_(i) {}
  Attribute(int i) : v_(int64_t{i}) {}
  Attribute(double f) : v_(f) {}
  Attribute(std::string s) : v_(std::move(s)) {}
  Attribute(const char* s) : v_(std::string(s)) {}
  Attribute(std::vector<int64_t> v) : v_(std::move(v)) {}
  Attribute(std::vector<double> v) : v_(std::move(v)) {}

  AttrKind kind() const { return static_cast<AttrKind>(v_.index()); }

  int64_t getInt() const { return std::get<int64_t>(v_); }
  double getFloat() const { return std::get<double>(v_); }
  const std::string& getString() const { return std::get<std::string>(v_); }
  const std::vector<int64_t>& getInts() const { return std::get<std::vector<int64_t>>(v_); }
  const std::vector<double>& getFloats() const { return std::get<std::vector<double>>(v_); }

  /// The text form: 3, 0.5, "s", [1, 2], [0.5, 1.0], [].
  std::string str() const;

  friend bool operator==(const Attribute&, const Attribute&) = default;

private:
  Storage v_;
};

/// Shortest text that reads back to the same double, always with a '.', an
/// exponent, or inf/nan, so that it never reads back as an integer.
std::string formatFloat(double v);
/// A double-quoted string with \" \\ \n \t and \xx escapes.
std::string quoteString(std::string_view s);

struct NamedAttr {
  std::string name;
  Attribute value;
  friend bool operator==(const NamedAttr&, const NamedAttr&) = default;
};

} // namespace lwcc
