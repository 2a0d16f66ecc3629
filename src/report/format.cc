// Text formatting for the training report: see format.h.
#include "report/format.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <utility>

namespace myriad::report {

std::string sfmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  const int n = std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  if (n < 0) return "";
  if (size_t(n) < sizeof(buf)) return std::string(buf, size_t(n));
  std::string s(size_t(n) + 1, '\0');
  va_start(ap, f);
  std::vsnprintf(s.data(), s.size(), f, ap);
  va_end(ap);
  s.resize(size_t(n));
  return s;
}

std::string px(double v) {
  return sfmt("%.1f", v);
}

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (const char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '\n':
      case '\t':
        out += ch;
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
          out += "\xEF\xBF\xBD";
        else
          out += ch;
    }
  }
  return out;
}

std::string truncate_utf8(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s + " \xE2\x80\xA6 (cut at " + std::to_string(max) + " bytes)";
}

std::string grouped(double v) {
  const bool neg = v < 0;
  std::string s = sfmt("%.0f", std::abs(v));
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return neg ? "-" + s : s;
}

namespace {

// `v` with as many decimals as `step` needs (steps are 1, 2 or 5 x 10^k).
std::string fixed(double v, double step) {
  const int dec = step > 0 ? std::clamp(int(-std::floor(std::log10(step) + 1e-9)), 0, 6) : 0;
  return sfmt("%.*f", dec, v);
}

}  // namespace

std::string fmt_tick(double v, double step, double span) {
  step = std::abs(step);
  if (std::abs(v) <= step * 1e-9) return "0";
  span = std::max(std::abs(span), std::abs(v));
  if (span >= 1e4) {
    static const char* const kSuffix[] = {"k", "M", "G", "T", "P"};
    const int u = std::clamp(int(std::floor(std::log10(span) / 3 + 1e-9)), 1, 5);
    const double unit = std::pow(1000.0, u);
    return fixed(v / unit, step / unit) + kSuffix[u - 1];
  }
  if (span < 1e-2) {
    const int e = int(std::floor(std::log10(span) + 1e-9));
    const double unit = std::pow(10.0, e);
    return fixed(v / unit, step / unit) + "e" + std::to_string(e);
  }
  return fixed(v, step);
}

std::string fmt_value(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::abs(v);
  if (a >= 1e4) {
    static const char* const kSuffix[] = {"k", "M", "G", "T", "P", "E"};
    const int u = std::clamp(int(std::floor(std::log10(a) / 3 + 1e-9)), 1, 6);
    return sfmt("%.3g%s", v / std::pow(1000.0, u), kSuffix[u - 1]);
  }
  return sfmt("%.4g", v);
}

std::string fmt_step(double step) {
  return step == std::floor(step) && std::abs(step) < 1e15 ? grouped(step) : sfmt("%g", step);
}

std::string counted(int64_t n, const std::string& one, const std::string& many) {
  return grouped(double(n)) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

std::string fmt_duration(double s) {
  if (!(s >= 0)) return "-";
  const auto t = int64_t(std::llround(s));
  if (t < 60) return sfmt("%llds", static_cast<long long>(t));
  if (t < 3600) return sfmt("%lldm %02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return sfmt("%lldh %02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t % 3600 / 60));
}

std::string cut(std::string s, size_t n) {
  return s.size() > n ? truncate_utf8(std::move(s), n) : s;
}

}  // namespace myriad::report
