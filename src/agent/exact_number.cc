// Exact rationals and the calculator's parser: see exact_number.h.
#include "agent/exact_number.h"

#include <cstdlib>
#include <numeric>

#include "core/error.h"

namespace myriad {

namespace {

using i128 = __int128;

constexpr i128 kMax = INT64_MAX;

// num / den from 128-bit parts: reduced, den > 0, both within int64 (else one error naming the operation).
Exact reduce(i128 num, i128 den, const char* op) {
  MYRIAD_REQUIRE(den != 0, kValue, "division by zero");
  if (den < 0) {
    num = -num;
    den = -den;
  }
  i128 a = num < 0 ? -num : num, b = den;
  while (b != 0) {
    const i128 t = a % b;
    a = b;
    b = t;
  }
  if (a > 1) {
    num /= a;
    den /= a;
  }
  MYRIAD_REQUIRE(num <= kMax && num >= -kMax && den <= kMax, kValue, "number too large (", op,
                 " overflows 64-bit integers)");
  return Exact::fraction(int64_t(num), int64_t(den));
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Exact parse() {
    MYRIAD_REQUIRE(s_.size() <= 256, kValue, "expression of ", s_.size(), " characters: at most 256");
    const Exact v = expr();
    skip();
    if (i_ < s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw_error(ErrorKind::kValue, "cannot evaluate '", s_, "': ", what, " at character ", i_ + 1);
  }
  void skip() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  Exact expr() {
    Exact v = term();
    for (;;) {
      if (eat('+'))
        v = v + term();
      else if (eat('-'))
        v = v - term();
      else
        return v;
    }
  }
  Exact term() {
    Exact v = factor();
    for (;;) {
      if (eat('*'))
        v = v * factor();
      else if (eat('/'))
        v = v / factor();
      else
        return v;
    }
  }
  Exact factor() {
    if (eat('-')) return -factor();
    if (eat('(')) {
      if (++depth_ > 32) fail("more than 32 levels of parentheses");
      const Exact v = expr();
      if (!eat(')')) fail("missing ')'");
      --depth_;
      return v;
    }
    skip();
    const size_t start = i_;
    while (i_ < s_.size() && ((s_[i_] >= '0' && s_[i_] <= '9') || s_[i_] == '.')) ++i_;
    if (start == i_)
      fail(i_ < s_.size() ? "expected a number, got '" + std::string(1, s_[i_]) + "'" : "expected a number at the end");
    const std::optional<Exact> v = Exact::parse(s_.substr(start, i_ - start));
    if (!v) fail("bad number '" + std::string(s_.substr(start, i_ - start)) + "'");
    return *v;
  }

  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Exact Exact::fraction(int64_t num, int64_t den) {
  MYRIAD_REQUIRE(den != 0, kValue, "division by zero");
  if (den < 0) {
    MYRIAD_REQUIRE(num != INT64_MIN && den != INT64_MIN, kValue, "number too large");
    num = -num;
    den = -den;
  }
  const int64_t g = std::gcd(num < 0 ? -num : num, den);
  Exact e;
  e.num_ = g > 1 ? num / g : num;
  e.den_ = g > 1 ? den / g : den;
  return e;
}

std::optional<Exact> Exact::parse(std::string_view t) {
  bool negative = false;
  if (!t.empty() && t[0] == '-') {
    negative = true;
    t.remove_prefix(1);
  }
  if (t.empty()) return std::nullopt;
  int64_t num = 0, den = 1;
  int digits = 0;
  bool dot = false, any = false;
  for (const char c : t) {
    if (c == '.') {
      if (dot) return std::nullopt;
      dot = true;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    any = true;
    if (num != 0 || c != '0') ++digits;
    if (digits > 18) return std::nullopt;
    num = num * 10 + (c - '0');
    if (dot) {
      if (den > INT64_MAX / 10) return std::nullopt;
      den *= 10;
    }
  }
  if (!any) return std::nullopt;
  return fraction(negative ? -num : num, den);
}

bool Exact::terminates() const {
  int64_t d = den_;
  while (d % 2 == 0) d /= 2;
  while (d % 5 == 0) d /= 5;
  return d == 1;
}

std::string Exact::str() const {
  if (den_ == 1) return std::to_string(num_);
  if (!terminates()) return std::to_string(num_) + "/" + std::to_string(den_);
  // num / den = m / 10^k for the smallest k.
  i128 m = num_, p = 1;
  int k = 0;
  while (p % den_ != 0) {
    p *= 10;
    ++k;
  }
  m = m * (p / den_);
  const bool negative = m < 0;
  if (negative) m = -m;
  std::string digits;
  for (i128 x = m; x > 0 || int(digits.size()) <= k; x /= 10) digits.insert(digits.begin(), char('0' + int(x % 10)));
  digits.insert(digits.end() - k, '.');
  return (negative ? "-" : "") + digits;
}

Exact Exact::rounded(int decimals) const {
  i128 p = 1;
  for (int i = 0; i < decimals; ++i) p *= 10;
  const i128 scaled = i128(num_) * p;
  const i128 q = scaled / den_, r = scaled % den_;
  i128 n = q;
  if ((r < 0 ? -r : r) * 2 >= den_) n += scaled < 0 ? -1 : 1;
  return reduce(n, p, "rounding");
}

Exact Exact::operator+(const Exact& o) const {
  return reduce(i128(num_) * o.den_ + i128(o.num_) * den_, i128(den_) * o.den_, "addition");
}
Exact Exact::operator-(const Exact& o) const {
  return reduce(i128(num_) * o.den_ - i128(o.num_) * den_, i128(den_) * o.den_, "subtraction");
}
Exact Exact::operator*(const Exact& o) const {
  return reduce(i128(num_) * o.num_, i128(den_) * o.den_, "multiplication");
}
Exact Exact::operator/(const Exact& o) const {
  MYRIAD_REQUIRE(o.num_ != 0, kValue, "division by zero");
  return reduce(i128(num_) * o.den_, i128(den_) * o.num_, "division");
}
Exact Exact::operator-() const {
  return reduce(-i128(num_), den_, "negation");
}

Exact evaluate_expression(std::string_view expression) {
  return Parser(expression).parse();
}

}  // namespace myriad
