// Shared pieces of the fuzz targets (tests/fuzz/fuzz_*.cc): inputs as files, the fixtures some parsers need
// (a tokenizer, a tiny model), and the one rule every target enforces.
//
// The rule: a parser of outside data either accepts its input or throws one myriad::Error with a message. Any
// other way out (a crash, a sanitizer report, an abort from a violated invariant, another exception type such as
// nlohmann's json::exception or std::out_of_range, an empty message) is a bug the fuzzer reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "data/tokenize/tokenizer.h"

namespace myriad::fuzz {

// MYRIAD_FUZZ_VERBOSE=1: print each refusal (to see what a corpus exercises).
bool verbose();

// Runs `parse`; a myriad::Error is the expected refusal (its message must not be empty); anything else escapes
// to libFuzzer.
template <class F>
void expect_accept_or_error(F&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    MYRIAD_CHECK(e.what()[0] != '\0', "an Error without a message");
    if (verbose()) std::fprintf(stderr, "refused: %s\n", e.what());
  }
}

// A per-process scratch directory under /dev/shm (or TMPDIR), removed at exit.
const std::string& scratch_dir();

// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch(const std::string& name, std::string_view bytes);

// Loads `bytes` as a tokenizer file called `name` ("tokenizer.json", "tiktoken.model": the name picks the
// format); an accepted tokenizer must then encode a fixed multilingual text (special tokens parsed and as text)
// with ids inside its vocabulary, and decode them.
void check_tokenizer_file(const std::string& name, std::string_view bytes);

// Fixtures are built in LLVMFuzzerInitialize (each target defines it when it has some), so that their seconds
// of set-up do not count against the first input's 1 s timeout.
//
// A SentencePiece tokenizer trained once per process on the built-in corpus (vocab 400, as the unit tests).
const Tokenizer& test_tokenizer();

// Byte-level tokenizers (a hand-written tokenizer.json) whose special tokens are those of the kimi, k3 and deepseek-v3
// chat formats, so that chat_format_of picks that format.
const Tokenizer& kimi_format_tokenizer();
const Tokenizer& k3_format_tokenizer();
const Tokenizer& deepseek_format_tokenizer();
const Tokenizer& chatml_format_tokenizer();

// The tiny model's directory (configs/tiny.json at the tokenizer's vocabulary, random weights) in scratch_dir().
const std::string& tiny_model_dir();

}  // namespace myriad::fuzz
