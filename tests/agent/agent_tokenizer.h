// The tokenizer the agent tests share: trained (once per test binary) on tool-task text, so that prompts, tool
// names and call JSON take a few tokens each.
#pragma once

#include <string>
#include <vector>

#include "data/tokenize/tokenizer.h"

namespace myriad::test {

inline const Tokenizer& agent_tokenizer() {
  static const Tokenizer tok = [] {
    std::vector<std::string> texts;
    for (int i = 0; i < 80; ++i)
      texts.push_back("What is the total price of 3 plum and 2 fig in dollars? lookup_price calculator convert " +
                      std::to_string(i) + " {\"name\":\"item\",\"arguments\":{\"expression\":\"3*0.5\"}} 2026-03-14");
    return Tokenizer::train_from_texts(texts, 400);
  }();
  return tok;
}

}  // namespace myriad::test
