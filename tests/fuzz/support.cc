// See support.h.
#include "fuzz/support.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/byte_level_fixture.h"
#include "data/datasets/corpus.h"
#include "io/atomic_file.h"
#include "model/init.h"

namespace myriad::fuzz {

namespace fs = std::filesystem;

namespace {

struct Scratch {
  std::string dir;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::path(tmp ? tmp : "/tmp");
    dir = (base / ("myriad_fuzz_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

bool verbose() {
  static const bool v = std::getenv("MYRIAD_FUZZ_VERBOSE") != nullptr;
  return v;
}

const std::string& scratch_dir() {
  static Scratch s;
  return s.dir;
}

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  MYRIAD_CHECK(out.good(), "cannot write the fuzz input to ", path);
  return path;
}

const Tokenizer& test_tokenizer() {
  static const Tokenizer tok = Tokenizer::train_from_texts(generate_corpus(11, 60000), 400);
  return tok;
}

namespace {

Tokenizer tokenizer_with_specials(const std::string& name, std::initializer_list<const char*> specials) {
  std::vector<std::pair<std::string, bool>> added;
  for (const char* s : specials) added.emplace_back(s, true);
  return Tokenizer::load(write_scratch(name, hand_written_tokenizer_json(added).dump()));
}

}  // namespace

const Tokenizer& kimi_format_tokenizer() {
  static const Tokenizer tok = tokenizer_with_specials(
      "tokenizer.json", {"<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                         "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                         "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|media_begin|>", "<|media_content|>",
                         "<|media_end|>", "<|media_pad|>"});
  return tok;
}

const Tokenizer& k3_format_tokenizer() {
  static const Tokenizer tok = tokenizer_with_specials(
      "tokenizer.json", {"<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>", "<|media_begin|>", "<|media_content|>",
                         "<|media_end|>", "<|media_pad|>"});
  return tok;
}

const Tokenizer& deepseek_format_tokenizer() {
  static const Tokenizer tok = tokenizer_with_specials(
      "tokenizer.json",
      {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
       "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
       "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"});
  return tok;
}

const Tokenizer& chatml_format_tokenizer() {
  static const Tokenizer tok = tokenizer_with_specials(
      "tokenizer.json",
      {"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"});
  return tok;
}

const std::string& tiny_model_dir() {
  static const std::string dir = [] {
    const std::string model = scratch_dir() + "/tiny-model";
    std::ifstream in(MYRIAD_SOURCE_DIR "/configs/tiny.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["vocab_size"] = test_tokenizer().vocab_size();
    const std::string config_path = scratch_dir() + "/tiny-config.json";
    write_scratch("tiny-config.json", config.dump(2));
    write_random_model(config_path, model, InitOptions{});
    test_tokenizer().save(model + "/tokenizer");
    return model;
  }();
  return dir;
}

void check_tokenizer_file(const std::string& name, std::string_view bytes) {
  const std::string path = write_scratch(name, bytes);
  expect_accept_or_error([&] {
    const Tokenizer tok = Tokenizer::load(path);
    for (Specials s : {Specials::kParse, Specials::kAsText}) {
      const std::vector<int32_t> ids =
          tok.encode("Hello, world! DON'T 3 + 4 = 7 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 <|endoftext|>\xff", s);
      for (int32_t id : ids) MYRIAD_CHECK(id >= 0 && id < tok.vocab_size(), "id ", id, " outside the vocabulary");
      (void)tok.decode(ids);
    }
  });
}

}  // namespace myriad::fuzz
