// Text formatting for the training report (internal to src/report): printf into a string, HTML escaping, UTF-8
// safe cuts, and the number styles of the page (grouped digits, axis ticks, summary values, steps, durations).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace myriad::report {

// printf into a std::string.
[[gnu::format(printf, 1, 2)]] std::string sfmt(const char* f, ...);

// SVG coordinate: one decimal.
std::string px(double v);

// HTML text and attribute escaping; C0 control characters other than tab and newline become U+FFFD.
std::string esc(std::string_view s);

// Cuts `s` to at most `max` bytes at a UTF-8 character boundary, marking the cut.
std::string truncate_utf8(std::string s, size_t max);

// 1234567 -> "1,234,567"
std::string grouped(double v);

// An axis tick: `step` is the tick spacing, `span` the largest |tick| of the axis, so every tick of one axis
// has one style: 0.2e-3 ... 1.0e-3 for learning rates, 2k ... 10k for throughput, 2.5 ... 4.0 for losses.
std::string fmt_tick(double v, double step, double span);

// A value for the summary: 3.214, 0.0012, 5.3k, 12.1M.
std::string fmt_value(double v);

// A step: 12,000 (whole), else as %g.
std::string fmt_step(double step);

// "1 sample", "3 samples"
std::string counted(int64_t n, const std::string& one, const std::string& many = "");

// 42s, 3m 05s, 2h 07m; "-" for a negative or NaN time.
std::string fmt_duration(double s);

// `s`, or truncate_utf8(s, n) when it is longer than n bytes.
std::string cut(std::string s, size_t n);

}  // namespace myriad::report
