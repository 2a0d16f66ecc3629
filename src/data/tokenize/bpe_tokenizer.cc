// Byte-level BPE tokenizers from tiktoken and Hugging Face files. See bpe_tokenizer.h.
#include "data/tokenize/bpe_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "core/base64.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "data/tokenize/normalizer.h"
#include "io/atomic_file.h"

namespace myriad {

namespace {

namespace fs = std::filesystem;

// GPT-2's bytes_to_unicode, inverted: the byte each of its 256 characters stands for. Printable Latin-1 bytes
// ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) are their own character; the other 68 bytes are U+0100 + n in byte order.
std::map<uint32_t, uint8_t> byte_level_decoder() {
  std::map<uint32_t, uint8_t> m;
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m[printable ? b : 0x100 + extra++] = uint8_t(b);
  }
  return m;
}

// The bytes a ByteLevel string stands for: each character through the map; a character outside it (an added token
// such as "<｜begin▁of▁sentence｜>") is its own UTF-8, as Hugging Face's ByteLevel decoder does.
std::string byte_level_bytes(std::string_view s, const std::map<uint32_t, uint8_t>& dec) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    len = std::min(len, s.size() - i);
    uint32_t cp = len == 1 ? c : c & (0xFFu >> (len + 1));
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
    auto it = dec.find(cp);
    if (it != dec.end())
      out += char(it->second);
    else
      out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

// A literal string as a pattern: every ASCII punctuation character escaped.
std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) out += '\\';
    out += c;
  }
  return out;
}

// "content" of a tokenizer_config.json token field: a string or {"content": ...}.
std::string token_name(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

const std::set<std::string> kIgnoredTokenizerJsonKeys = {
    "version",  "truncation",    "padding",      "post_processor", "decoder",       "dropout",
    "fuse_unk", "byte_fallback", "trim_offsets", "normalized",     "prepend_scheme"};

void append_pretokenizer(const nlohmann::json& j, const std::string& path, const JsonSource& src,
                         std::vector<PretokenizeStep>& steps, bool& byte_level) {
  JsonFields f(j, path, src);
  const std::string type = f.string_or("type", "");
  if (type == "Sequence") {
    const nlohmann::json* list = f.opt_array("pretokenizers");
    if (!list) f.fail_missing("pretokenizers", "a Sequence pre-tokenizer lists its steps");
    for (size_t i = 0; i < list->size(); ++i)
      append_pretokenizer((*list)[i], f.path("pretokenizers") + "[" + std::to_string(i) + "]", src, steps, byte_level);
  } else if (type == "Split") {
    const nlohmann::json* pat = f.opt_object("pattern");
    if (!pat) f.fail_missing("pattern", "a Split pre-tokenizer needs {\"Regex\": ...} or {\"String\": ...}");
    JsonFields pf(*pat, f.path("pattern"), src);
    std::string regex;
    if (auto r = pf.opt_string("Regex"))
      regex = *r;
    else if (auto s = pf.opt_string("String"))
      regex = escape_literal(*s);
    else
      pf.fail_missing("Regex", "a Split pattern is {\"Regex\": ...} or {\"String\": ...}");
    pf.finish();
    PretokenizeStep st;
    st.kind = PretokenizeStep::Kind::kSplit;
    st.regex = std::make_shared<const Regex>(regex, src.name + ": " + f.path("pattern"));
    const std::string b = f.choice_or("behavior", "Isolated",
                                      {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"});
    st.behavior = b == "Removed"              ? SplitBehavior::kRemoved
                  : b == "Isolated"           ? SplitBehavior::kIsolated
                  : b == "MergedWithPrevious" ? SplitBehavior::kMergedWithPrevious
                  : b == "MergedWithNext"     ? SplitBehavior::kMergedWithNext
                                              : SplitBehavior::kContiguous;
    st.invert = f.bool_or("invert", false);
    steps.push_back(std::move(st));
  } else if (type == "ByteLevel") {
    PretokenizeStep st;
    st.kind = PretokenizeStep::Kind::kByteLevel;
    st.add_prefix_space = f.bool_or("add_prefix_space", true);
    static const std::shared_ptr<const Regex> gpt2 = std::make_shared<const Regex>(kGpt2Pattern, "GPT-2's pattern");
    if (f.bool_or("use_regex", true)) st.regex = gpt2;
    steps.push_back(std::move(st));
    byte_level = true;
  } else if (type == "Digits") {
    PretokenizeStep st;
    st.kind = PretokenizeStep::Kind::kSplit;
    st.regex = std::make_shared<const Regex>(R"(\p{N})", "the Digits pre-tokenizer");
    st.behavior = f.bool_or("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    steps.push_back(std::move(st));
  } else {
    f.fail_unsupported("type", j.value("type", nlohmann::json()),
                       "the pre-tokenizers myriad implements are ByteLevel, Split, Digits and Sequence");
  }
  f.finish();
}

}  // namespace

void BpeTokenizer::read_config(const std::string& dir, std::string* added_tokens_decoder_json) {
  const fs::path path = fs::path(dir) / kTokenizerConfigFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::string bytes = read_file(path.string());
  const nlohmann::json j = parse_json_document(bytes, path.string(), ErrorKind::kFormat);
  MYRIAD_REQUIRE(j.is_object(), kFormat, path.string(), ": not a JSON object");
  if (j.contains("bos_token")) bos_token_ = token_name(j["bos_token"]);
  if (j.contains("eos_token")) eos_token_ = token_name(j["eos_token"]);
  if (added_tokens_decoder_json && j.contains("added_tokens_decoder"))
    *added_tokens_decoder_json = j["added_tokens_decoder"].dump();
  files_.emplace_back(kTokenizerConfigFile, std::move(bytes));
}

BpeTokenizer BpeTokenizer::load_tiktoken(const std::string& model_path) {
  BpeTokenizer t;
  t.format_ = Format::kTiktoken;
  std::string bytes = read_file(model_path);
  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  size_t line_no = 0;
  // Ranks are 0..n-1 over n lines, so none can reach the line count (bounding the table before it is allocated).
  const size_t lines = size_t(std::count(bytes.begin(), bytes.end(), '\n')) + 1;
  for (size_t at = 0; at < bytes.size();) {
    size_t eol = bytes.find('\n', at);
    if (eol == std::string::npos) eol = bytes.size();
    std::string_view line(bytes.data() + at, eol - at);
    at = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    std::string token;
    MYRIAD_REQUIRE(sp != std::string_view::npos && base64_decode(line.substr(0, sp), token) && !token.empty(), kFormat,
                   model_path, ":", line_no, ": expected \"<base64 token> <rank>\"");
    const std::string_view r = line.substr(sp + 1);
    int64_t rank = 0;
    bool ok = !r.empty() && r.size() <= 9;
    for (size_t k = 0; ok && k < r.size(); ++k) {
      ok = r[k] >= '0' && r[k] <= '9';
      rank = rank * 10 + (r[k] - '0');
    }
    MYRIAD_REQUIRE(ok, kFormat, model_path, ":", line_no, ": rank '", r, "' is not a whole number below 10^9");
    MYRIAD_REQUIRE(size_t(rank) < lines, kFormat, model_path, ":", line_no, ": rank ", rank, " but the file has only ",
                   lines, " lines (ranks are 0..n-1)");
    if (size_t(rank) >= by_rank.size()) {
      by_rank.resize(size_t(rank) + 1);
      seen.resize(size_t(rank) + 1);
    }
    MYRIAD_REQUIRE(!seen[size_t(rank)], kFormat, model_path, ":", line_no, ": rank ", rank, " appears twice");
    seen[size_t(rank)] = true;
    by_rank[size_t(rank)] = std::move(token);
  }
  for (size_t r = 0; r < seen.size(); ++r)
    MYRIAD_REQUIRE(seen[r], kFormat, model_path, ": rank ", r, " is missing (ranks must be 0..n-1: special tokens are ",
                   "numbered from n)");
  MYRIAD_REQUIRE(!by_rank.empty(), kFormat, model_path, ": no tokens");
  const size_t n = by_rank.size();
  t.surface_ = by_rank;
  t.pieces_ = by_rank;
  t.bpe_ = ByteBpe::from_ranks(std::move(by_rank), model_path);
  t.files_.emplace_back(kTiktokenModelFile, std::move(bytes));

  std::string decoder_json;
  const std::string dir = fs::path(model_path).parent_path().string();
  t.read_config(dir.empty() ? "." : dir, &decoder_json);
  std::map<int64_t, std::string> names;
  if (!decoder_json.empty()) {
    const nlohmann::json d = nlohmann::json::parse(decoder_json);
    MYRIAD_REQUIRE(d.is_object(), kFormat, dir, "/", kTokenizerConfigFile, ": added_tokens_decoder must be an object");
    for (const auto& [key, v] : d.items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      MYRIAD_REQUIRE(end && *end == '\0' && !key.empty(), kFormat, dir, "/", kTokenizerConfigFile,
                     ": added_tokens_decoder key '", key, "' is not a token id");
      MYRIAD_REQUIRE(id >= int64_t(n) && id < int64_t(n) + kKimiReservedSpecialTokens, kFormat, dir, "/",
                     kTokenizerConfigFile, ": added token ", id, " lies outside the special ids [", n, ", ",
                     n + kKimiReservedSpecialTokens, ") of ", model_path);
      const std::string name = token_name(v);
      MYRIAD_REQUIRE(!name.empty(), kFormat, dir, "/", kTokenizerConfigFile, ": added token ", id, " has no content");
      names[id] = name;
    }
  }
  std::vector<AddedToken> specials;
  for (int64_t id = int64_t(n); id < int64_t(n) + kKimiReservedSpecialTokens; ++id) {
    auto it = names.find(id);
    AddedToken a;
    a.id = int32_t(id);
    a.content = it != names.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>";
    t.surface_.push_back(a.content);
    t.pieces_.push_back(a.content);
    specials.push_back(std::move(a));
  }
  t.added_ = AddedTokens(std::move(specials), model_path);
  PretokenizeStep st;
  st.kind = PretokenizeStep::Kind::kSplit;
  // Compiled once per process (a JIT compile of this pattern costs milliseconds).
  static const std::shared_ptr<const Regex> kimi =
      std::make_shared<const Regex>(kKimiPattern, "Kimi's pre-tokenizer pattern");
  st.regex = kimi;
  t.pre_ = Pretokenizer({std::move(st)});
  return t;
}

BpeTokenizer BpeTokenizer::load_hugging_face(const std::string& json_path) {
  BpeTokenizer t;
  t.format_ = Format::kHuggingFace;
  std::string bytes = read_file(json_path);
  const nlohmann::json j = parse_json_document(bytes, json_path, ErrorKind::kFormat);
  JsonSource src{json_path, UnknownFields::kWarn, &kIgnoredTokenizerJsonKeys, nullptr};
  JsonFields top(j, "", src);
  if (const nlohmann::json* norm = top.find("normalizer"); norm && !norm->is_null()) {
    // NFC alone, or a Sequence holding only NFC (Qwen's tokenizers).
    const nlohmann::json* n = norm;
    if (string_member(*n, "type") == "Sequence" && n->contains("normalizers") && (*n)["normalizers"].is_array() &&
        (*n)["normalizers"].size() == 1)
      n = &(*n)["normalizers"][0];
    if (!(string_member(*n, "type") == "NFC" && n->size() == 1))
      top.fail_unsupported("normalizer", *norm, "the normalizer myriad implements is NFC (through ICU)");
    t.nfc_ = true;
  }
  const nlohmann::json* model = top.opt_object("model");
  if (!model) top.fail_missing("model", "a tokenizer.json has a model");
  JsonFields m(*model, "model", src);
  const std::string type = m.string_or("type", "BPE");
  if (type != "BPE")
    m.fail_unsupported("type", (*model)["type"], "myriad reads byte-level BPE tokenizers (tiktoken, tokenizer.json)");
  if (const nlohmann::json* d = m.find("dropout"); d && !d->is_null())
    m.fail_unsupported("dropout", *d, "BPE dropout is a training-time regularizer; encode deterministically");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const nlohmann::json* v = m.find(k); v && !v->is_null() && !(v->is_string() && v->get<std::string>().empty()))
      m.fail_unsupported(k, *v, "subword prefixes and suffixes are not byte-level BPE");
  const bool ignore_merges = m.bool_or("ignore_merges", false);
  m.find("unk_token");

  std::vector<PretokenizeStep> steps;
  bool byte_level = false;
  if (const nlohmann::json* pre = top.find("pre_tokenizer"); pre && !pre->is_null())
    append_pretokenizer(*pre, "pre_tokenizer", src, steps, byte_level);
  MYRIAD_REQUIRE(byte_level, kUnsupported, json_path,
                 ": no ByteLevel pre-tokenizer: the BPE is not over bytes (SentencePiece-style BPE with Metaspace or "
                 "byte fallback is not what myriad reads from tokenizer.json)");

  // The vocabulary: ByteLevel strings -> bytes.
  const auto dec = byte_level_decoder();
  const nlohmann::json* vocab = m.opt_object("vocab");
  if (!vocab) m.fail_missing("vocab", "a BPE model has a vocabulary");
  std::unordered_map<std::string, int32_t> id_of;
  int64_t size = 0;
  for (const auto& [s, v] : vocab->items()) {
    MYRIAD_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t(1) << 31), kFormat,
                   json_path, ": model.vocab[\"", s, "\"] = ", short_dump(v), ": a token id is a non-negative integer");
    id_of[s] = int32_t(v.get<int64_t>());
    size = std::max(size, v.get<int64_t>() + 1);
  }
  std::vector<AddedToken> added;
  if (const nlohmann::json* list = top.opt_array("added_tokens")) {
    for (size_t i = 0; i < list->size(); ++i) {
      JsonFields a((*list)[i], "added_tokens[" + std::to_string(i) + "]", src);
      AddedToken tok;
      const int64_t id = a.req_int("id");
      if (id < 0 || id >= (int64_t(1) << 31)) a.fail("id", (*list)[i]["id"], "a token id is a non-negative integer");
      tok.id = int32_t(id);
      auto content = a.opt_string("content");
      if (!content || content->empty()) a.fail_missing("content", "an added token has non-empty content");
      tok.content = *content;
      tok.special = a.bool_or("special", false);
      tok.lstrip = a.bool_or("lstrip", false);
      tok.rstrip = a.bool_or("rstrip", false);
      if (a.bool_or("single_word", false))
        a.fail_unsupported("single_word", true,
                           "myriad matches added tokens anywhere (single_word is not implemented)");
      a.find("normalized");  // no normalizer: normalized and raw text are the same
      a.finish();
      size = std::max(size, id + 1);
      added.push_back(std::move(tok));
    }
  }
  // Ids may leave gaps (a model's reserved ids), but the id space is allocated whole: a file of a few tokens with
  // an id in the millions would cost gigabytes. Bounded by twice the tokens it defines (plus room for small files).
  const int64_t defined = int64_t(id_of.size() + added.size());
  MYRIAD_REQUIRE(size <= 2 * defined + 1024, kFormat, json_path, ": the largest token id is ", size - 1,
                 " but the file defines only ", defined,
                 " tokens: ids may leave gaps, but not more than the tokens defined (the id space would take memory "
                 "out of proportion to the file)");
  std::vector<std::string> token_bytes(static_cast<size_t>(size));
  t.pieces_.assign(size_t(size), std::string());
  for (const auto& [s, id] : id_of) {
    token_bytes[size_t(id)] = byte_level_bytes(s, dec);
    t.pieces_[size_t(id)] = s;
  }
  t.surface_ = token_bytes;
  for (const AddedToken& a : added) {
    t.surface_[size_t(a.id)] = byte_level_bytes(a.content, dec);
    t.pieces_[size_t(a.id)] = a.content;
  }

  // The merges, in rank order.
  std::vector<ByteBpe::Merge> merges;
  if (const nlohmann::json* list = m.opt_array("merges")) {
    merges.reserve(list->size());
    for (size_t i = 0; i < list->size(); ++i) {
      const nlohmann::json& e = (*list)[i];
      std::string l, r;
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        MYRIAD_REQUIRE(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, kFormat, json_path,
                       ": model.merges[", i, "] = ", short_dump(e), ": a merge is \"left right\"");
        l = s.substr(0, sp);
        r = s.substr(sp + 1);
      } else {
        MYRIAD_REQUIRE(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), kFormat, json_path,
                       ": model.merges[", i, "] = ", short_dump(e), ": a merge is \"left right\" or [left, right]");
        l = e[0].get<std::string>();
        r = e[1].get<std::string>();
      }
      auto li = id_of.find(l), ri = id_of.find(r), mi = id_of.find(l + r);
      MYRIAD_REQUIRE(li != id_of.end() && ri != id_of.end() && mi != id_of.end(), kFormat, json_path, ": model.merges[",
                     i, "] = ", short_dump(e), ": ",
                     li == id_of.end()   ? "'" + l + "'"
                     : ri == id_of.end() ? "'" + r + "'"
                                         : "'" + l + r + "'",
                     " is not in the vocabulary");
      merges.push_back({li->second, ri->second, mi->second});
    }
  }
  m.finish();
  top.finish();
  t.bpe_ = ByteBpe::from_merges(std::move(token_bytes), merges, ignore_merges, json_path);
  t.added_ = AddedTokens(std::move(added), json_path);
  t.pre_ = Pretokenizer(std::move(steps));
  t.files_.emplace_back("tokenizer.json", std::move(bytes));  // saved under the name load() looks for
  const std::string dir = fs::path(json_path).parent_path().string();
  t.read_config(dir.empty() ? "." : dir, nullptr);
  return t;
}

void BpeTokenizer::encode(std::string_view text, bool include_special, std::vector<int32_t>& out) const {
  added_.split(
      text, include_special,
      [&](std::string_view run) {
        auto piece = [&](std::string_view p) { bpe_.encode(p, out); };
        if (nfc_)
          pre_.for_each_piece(nfc_normalize(run), piece);
        else
          pre_.for_each_piece(run, piece);
      },
      [&](int32_t id) { out.push_back(id); });
}

std::string byte_level_string(std::string_view bytes) {
  static const std::vector<uint32_t> code_point = [] {  // byte -> its character: byte_level_decoder inverted
    std::vector<uint32_t> cp(256);
    for (const auto& [c, b] : byte_level_decoder()) cp[b] = c;
    return cp;
  }();
  std::string out;
  for (const char ch : bytes) {
    const uint32_t c = code_point[uint8_t(ch)];  // < 0x200: one or two UTF-8 bytes
    if (c < 0x80) {
      out += char(c);
    } else {
      out += char(0xC0 | (c >> 6));
      out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

}  // namespace myriad
