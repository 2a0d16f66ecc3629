// `myriad tokenizer train --data PATH... --vocab N --out DIR [--seed S] [--max-sentences N]`: trains the
// SentencePiece BPE tokenizer (train/tokenizer.h) on text files, JSONL files ("text") or directories of them.
// `myriad tokenizer encode --tokenizer DIR|FILE [--text TEXT | --jsonl FILE] [--pieces] [--as-text] [--time]`:
// prints the ids, comma-separated (the text is read from stdin when --text is absent); --pieces prints one
// "id<TAB>piece" line per token instead; --jsonl encodes each line's "text" and prints one JSON array per line;
// --as-text encodes special tokens' text as ordinary text; --time reports the encoding speed on stderr.
// `myriad tokenizer decode --tokenizer DIR|FILE --ids 1,2,3`: writes the decoded bytes exactly (a newline is added
// only when stdout is a terminal); `--jsonl FILE` decodes each line's JSON array of ids and prints {"hex": ...}.
// --tokenizer takes any kind tokenizer.h reads (myriad's SentencePiece, tiktoken, Hugging Face tokenizer.json).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "data/tokenize/tokenizer.h"
#include "io/atomic_file.h"

namespace {

// Options that belong to one action only.
void require_only(const myriad::cli::Args& args, const std::string& action, const std::vector<std::string>& allowed) {
  for (const char* name : {"data", "vocab", "out", "seed", "max-sentences", "tokenizer", "text", "ids", "pieces",
                           "jsonl", "as-text", "time"}) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == name;
    MYRIAD_REQUIRE(ok || !args.has(name), kValue, "--", name, " is not an option of 'tokenizer ", action,
                   "' (see myriad tokenizer --help)");
  }
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && s[j] != ',' && s[j] != ' ' && s[j] != '\t' && s[j] != '\n') ++j;
    const std::string tok = s.substr(i, j - i);
    char* end = nullptr;
    const long v = std::strtol(tok.c_str(), &end, 10);
    MYRIAD_REQUIRE(end && *end == '\0' && v >= 0 && v <= INT32_MAX, kValue, "--ids: '", tok,
                   "' is not a token id (a non-negative whole number)");
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

int run_train(const myriad::cli::Args& args) {
  require_only(args, "train", {"data", "vocab", "out", "seed", "max-sentences"});
  std::vector<std::string> paths;
  if (auto d = args.get("data")) paths.push_back(*d);
  for (size_t i = 1; i < args.positional().size(); ++i) paths.push_back(args.positional()[i]);
  MYRIAD_REQUIRE(!paths.empty(), kValue, "tokenizer train needs --data PATH... (text files, JSONL or directories)");
  MYRIAD_REQUIRE(args.has("vocab"), kValue, "tokenizer train needs --vocab N");
  const auto out = args.get("out");
  MYRIAD_REQUIRE(out.has_value(), kValue, "tokenizer train needs --out DIR");
  const long vocab = args.get_int("vocab", 0, myriad::kMinVocabSize, 1L << 24);
  myriad::TokenizerTrainOptions opt;
  opt.seed = uint64_t(args.get_int("seed", 0, 0, 1L << 62));
  opt.max_sentences = args.get_int("max-sentences", long(opt.max_sentences), 1, 1L << 40);
  const auto t0 = std::chrono::steady_clock::now();
  const myriad::Tokenizer t = myriad::Tokenizer::train(paths, vocab, *out, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained a %lld-token SentencePiece BPE tokenizer in %.1f s (%s)\nwrote %s/%s and %s/%s\n",
              static_cast<long long>(t.vocab_size()), secs, t.hash().c_str(), out->c_str(), myriad::kTokenizerModelFile,
              out->c_str(), myriad::kTokenizerJsonFile);
  return 0;
}

// The lines of a JSONL file, each handed to fn with its 1-based number.
template <class Fn>
void for_each_jsonl_line(const std::string& path, Fn&& fn) {
  const std::string bytes = myriad::read_file(path);
  size_t line_no = 0;
  for (size_t at = 0; at < bytes.size();) {
    size_t eol = bytes.find('\n', at);
    if (eol == std::string::npos) eol = bytes.size();
    const std::string line = bytes.substr(at, eol - at);
    at = eol + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    MYRIAD_REQUIRE(!j.is_discarded(), kFormat, path, ":", line_no, ": not JSON");
    fn(j, line_no);
  }
}

int run_encode(const myriad::cli::Args& args) {
  require_only(args, "encode", {"tokenizer", "text", "pieces", "jsonl", "as-text", "time"});
  const auto dir = args.get("tokenizer");
  MYRIAD_REQUIRE(dir.has_value(), kValue, "tokenizer encode needs --tokenizer DIR|FILE");
  MYRIAD_REQUIRE(args.positional().size() == 1, kValue, "tokenizer encode: unexpected argument '",
                 args.positional().size() > 1 ? args.positional()[1] : "", "' (quote the text: --text \"...\")");
  MYRIAD_REQUIRE(!(args.has("text") && args.has("jsonl")), kValue,
                 "tokenizer encode: --text and --jsonl exclude each other");
  const myriad::Tokenizer t = myriad::Tokenizer::load(*dir);
  const myriad::Specials specials = args.has("as-text") ? myriad::Specials::kAsText : myriad::Specials::kParse;
  std::vector<std::string> texts;
  if (auto path = args.get("jsonl")) {
    for_each_jsonl_line(*path, [&](const nlohmann::json& j, size_t line_no) {
      MYRIAD_REQUIRE(j.is_object() && j.contains("text") && j["text"].is_string(), kFormat, *path, ":", line_no,
                     ": expected {\"text\": \"...\"}");
      texts.push_back(j["text"].get<std::string>());
    });
  } else if (auto s = args.get("text")) {
    texts.push_back(*s);
  } else {
    texts.emplace_back(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::vector<std::vector<int32_t>> all;
  all.reserve(texts.size());
  size_t bytes = 0, tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& text : texts) {
    all.push_back(t.encode(text, specials));
    bytes += text.size();
    tokens += all.back().size();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (args.has("time"))
    std::fprintf(stderr, "encoded %zu bytes into %zu tokens in %.4f s: %.2f MB/s (%s tokenizer, one thread)\n", bytes,
                 tokens, secs, secs > 0 ? double(bytes) / secs / 1e6 : 0.0, myriad::tokenizer_kind_name(t.kind()));
  if (args.has("jsonl")) {
    std::string out;
    for (const auto& ids : all) out += nlohmann::json(ids).dump() + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const std::vector<int32_t>& ids = all.front();
  if (args.has("pieces")) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, t.piece(id).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_decode(const myriad::cli::Args& args) {
  require_only(args, "decode", {"tokenizer", "ids", "jsonl"});
  const auto dir = args.get("tokenizer");
  MYRIAD_REQUIRE(dir.has_value(), kValue, "tokenizer decode needs --tokenizer DIR|FILE");
  const auto ids = args.get("ids");
  const auto jsonl = args.get("jsonl");
  MYRIAD_REQUIRE(ids.has_value() != jsonl.has_value(), kValue, "tokenizer decode needs --ids 1,2,3 or --jsonl FILE");
  const myriad::Tokenizer t = myriad::Tokenizer::load(*dir);
  if (jsonl) {
    std::string out;
    for_each_jsonl_line(*jsonl, [&](const nlohmann::json& j, size_t line_no) {
      std::vector<int32_t> v;
      MYRIAD_REQUIRE(j.is_array(), kFormat, *jsonl, ":", line_no, ": expected a JSON array of token ids");
      for (const auto& e : j) {
        MYRIAD_REQUIRE(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= INT32_MAX, kFormat, *jsonl,
                       ":", line_no, ": ", e.dump(), " is not a token id");
        v.push_back(int32_t(e.get<int64_t>()));
      }
      static const char* hex = "0123456789abcdef";
      std::string h;
      for (unsigned char c : t.decode(v)) {
        h += hex[c >> 4];
        h += hex[c & 15];
      }
      out += "{\"hex\": \"" + h + "\"}\n";
    });
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const std::string text = t.decode(parse_ids(*ids));
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (::isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  return 0;
}

int run_tokenizer(const myriad::cli::Args& args) {
  MYRIAD_REQUIRE(!args.positional().empty(), kValue,
                 "tokenizer needs an action: train, encode or decode (see myriad tokenizer --help)");
  const std::string& action = args.positional()[0];
  if (action == "train") return run_train(args);
  MYRIAD_REQUIRE(args.positional().size() == 1 || action == "encode", kValue, "tokenizer ", action,
                 ": unexpected argument '", args.positional().size() > 1 ? args.positional()[1] : "", "'");
  if (action == "encode") return run_encode(args);
  if (action == "decode") return run_decode(args);
  myriad::throw_error(myriad::ErrorKind::kValue, "tokenizer: unknown action '", action, "' (train, encode or decode)");
}

}  // namespace

MYRIAD_COMMAND("tokenizer", "train a SentencePiece BPE tokenizer; encode text to ids; decode ids to text",
               "myriad tokenizer train --data PATH... --vocab N --out DIR | encode --tokenizer DIR|FILE [--text TEXT | "
               "--jsonl FILE] | decode --tokenizer DIR|FILE --ids 1,2,3",
               {{"data", "PATH...", "train: text files, JSONL files (\"text\") or directories of them"},
                {"vocab", "N", "train: vocabulary size (>= 269: 12 special + 256 byte tokens come first)"},
                {"out", "DIR", "train: where tokenizer.model and tokenizer.json go"},
                {"seed", "S", "train: seed of the sentence sample (default 0)"},
                {"max-sentences", "N", "train: sample at most N sentences (lines) (default 2000000)"},
                {"tokenizer", "DIR|FILE",
                 "encode/decode: a tokenizer directory or file (tokenizer.model, tiktoken.model, tokenizer.json)"},
                {"text", "TEXT", "encode: the text (default: read stdin)"},
                {"pieces", "", "encode: print id and piece per line"},
                {"jsonl", "FILE",
                 "encode: each line's \"text\", one JSON array of ids out per line; decode: each "
                 "line's array of ids, {\"hex\": bytes} out per line"},
                {"as-text", "", "encode: special tokens' text is encoded as ordinary text"},
                {"time", "", "encode: print bytes, tokens and MB/s of the encoding (not the loading) on stderr"},
                {"ids", "1,2,3", "decode: token ids, comma- or space-separated"}},
               run_tokenizer);
