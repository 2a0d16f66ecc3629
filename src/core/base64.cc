#include "core/base64.h"

#include <cstdint>

namespace myriad {

bool base64_decode(std::string_view in, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  if (in.size() % 4 != 0) return false;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '=') {
      // Padding only at the end, at most two.
      if (i + 2 < in.size() || (i + 1 < in.size() && in[i + 1] != '=')) return false;
      break;
    }
    const int v = value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return true;
}

}  // namespace myriad
