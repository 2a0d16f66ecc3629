// Exact rational numbers for the agent's tools (the calculator, prices, conversions) and for checking answers:
// a tool's result and a task's answer must be exactly equal, never "close". num / den with den > 0 and the
// fraction reduced; int64 parts, every operation checked (an overflow is a kValue error, never a wrong number).
//
// Text: parse() reads an optional '-', digits, and an optional '.' with digits ("12", "-0.25", "3."), at most 18
// significant digits. str() writes an integer ("12"), a terminating decimal without trailing zeros ("4.75") when
// den is 2^a 5^b, and otherwise "num/den" ("1/3").
//
// The calculator's grammar (evaluate_expression):
//   expr := term (('+' | '-') term)*      term := factor (('*' | '/') factor)*
//   factor := '-' factor | NUMBER | '(' expr ')'          spaces anywhere between tokens
// At most 256 characters and 32 levels of parentheses; errors (kValue) say what and at which character.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace myriad {

class Exact {
 public:
  Exact() = default;
  Exact(int64_t integer) : num_(integer) {}  // NOLINT: integers convert implicitly
  // num / den, reduced. Throws kValue for den == 0.
  static Exact fraction(int64_t num, int64_t den);
  static std::optional<Exact> parse(std::string_view text);

  int64_t num() const { return num_; }
  int64_t den() const { return den_; }
  std::string str() const;
  // Rounded half away from zero to `decimals` places (for results that do not terminate).
  Exact rounded(int decimals) const;
  bool terminates() const;  // den is 2^a 5^b

  Exact operator+(const Exact& o) const;
  Exact operator-(const Exact& o) const;
  Exact operator*(const Exact& o) const;
  Exact operator/(const Exact& o) const;  // throws kValue for division by zero
  Exact operator-() const;
  bool operator==(const Exact& o) const = default;

 private:
  int64_t num_ = 0, den_ = 1;
};

// The calculator: see the grammar above.
Exact evaluate_expression(std::string_view expression);

}  // namespace myriad
