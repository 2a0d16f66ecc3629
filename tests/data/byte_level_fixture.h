// A byte-level BPE tokenizer.json written by hand for tests (not by myriad's code): the 256 ByteLevel characters of
// GPT-2's bytes_to_unicode (ids 0..255 in byte order), "Ġt" (256) and "Ġth" (257) with the merges "Ġ t" and
// "Ġt h", then the given added tokens from id 258 on; a ByteLevel pre-tokenizer with GPT-2's pattern.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace myriad {

inline nlohmann::json hand_written_tokenizer_json(const std::vector<std::pair<std::string, bool>>& added) {
  nlohmann::json vocab = nlohmann::json::object();
  std::vector<int> printable;
  for (int b = 0x21; b <= 0x7E; ++b) printable.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
  auto utf8 = [](int cp) {
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    return s;
  };
  int n = 0, extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool p = std::find(printable.begin(), printable.end(), b) != printable.end();
    vocab[utf8(p ? b : 0x100 + extra++)] = n++;
  }
  vocab["Ġt"] = n++;
  vocab["Ġth"] = n++;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"Ġ t", "Ġt h"}}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["added_tokens"] = nlohmann::json::array();
  for (const auto& [content, special] : added)
    j["added_tokens"].push_back({{"id", n++}, {"content", content}, {"special", special}});
  return j;
}

}  // namespace myriad
