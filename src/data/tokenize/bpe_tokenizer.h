// The byte-level BPE tokenizers that published checkpoints ship, read from their own files:
//   - tiktoken format (Kimi K2 / K3 / Kimi-Linear): `tiktoken.model` (one "base64(token bytes) rank" per line, ranks
//     0..n-1) and `tokenizer_config.json`. The pre-tokenizer pattern is not in the files: it is Kimi's (its
//     tokenization_kimi.py), kKimiPattern. Special tokens: the 256 ids n..n+255, named from added_tokens_decoder
//     and "<|reserved_token_{id}|>" otherwise, as Kimi's tokenizer code numbers them.
//   - Hugging Face `tokenizer.json` with a BPE model over ByteLevel bytes (DeepSeek-V3, Llama 3, GPT-2 style):
//     added_tokens, a pre_tokenizer of Split / ByteLevel / Digits steps (or a Sequence of them), the vocabulary and
//     the merges (either "a b" strings or ["a", "b"] pairs), ignore_merges. The ByteLevel byte-to-character map
//     (GPT-2's bytes_to_unicode) is undone when the vocabulary is read, so the BPE runs on bytes. Refused with a
//     message naming the kind: other models (Unigram, WordPiece, WordLevel), normalizers other than NFC (which
//     runs through ICU, normalizer.h), other pre-tokenizers,
//     BPE dropout, subword prefixes/suffixes, single_word added tokens, a BPE without the ByteLevel step.
// encode: added tokens are cut out first (added_tokens.h), each run between them is pre-tokenized
// (pretokenizer.h) and each piece merged (byte_bpe.h). Nothing is prepended or appended (no BOS: the chat format
// adds what the model needs; Hugging Face's post_processor is not applied, as with add_special_tokens=False).
// decode: each id's bytes concatenated; an added token decodes to its content (through the ByteLevel map, as
// Hugging Face's decoder does, when the model is Hugging Face's).
//
// Leaves out: Kimi's split of runs longer than 25,000 characters (a guard of its Python wrapper against a tiktoken
// stack overflow; ids differ only inside such runs), caching of pieces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenize/added_tokens.h"
#include "data/tokenize/byte_bpe.h"
#include "data/tokenize/pretokenizer.h"

namespace myriad {

inline constexpr const char* kTiktokenModelFile = "tiktoken.model";
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";
inline constexpr int kKimiReservedSpecialTokens = 256;

// Kimi's pre-tokenizer pattern (tokenization_kimi.py's pat_str, the alternatives joined with '|').
inline constexpr const char* kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

// Bytes as GPT-2's ByteLevel characters (bytes_to_unicode): how Hugging Face files and llama.cpp's "gpt2"
// vocabularies write a byte-level token ("Ġthe" for " the").
std::string byte_level_string(std::string_view bytes);

class BpeTokenizer {
 public:
  enum class Format { kTiktoken, kHuggingFace };

  // tiktoken.model (+ tokenizer_config.json beside it when present).
  static BpeTokenizer load_tiktoken(const std::string& model_path);
  // tokenizer.json (+ tokenizer_config.json beside it when present).
  static BpeTokenizer load_hugging_face(const std::string& json_path);

  // Appends the ids of text; include_special false leaves special tokens' text as text (added_tokens.h).
  void encode(std::string_view text, bool include_special, std::vector<int32_t>& out) const;

  Format format() const { return format_; }
  int64_t vocab_size() const { return int64_t(surface_.size()); }
  const std::string& surface(int32_t id) const { return surface_[size_t(id)]; }  // bytes it decodes to
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  const AddedTokens& added() const { return added_; }
  const ByteBpe& bpe() const { return bpe_; }
  const Pretokenizer& pretokenizer() const { return pre_; }  // tiktoken: Kimi's pattern, one isolated split
  bool nfc() const { return nfc_; }
  int32_t byte_token(uint8_t b) const { return bpe_.byte_token(b); }
  const std::string& bos_token() const { return bos_token_; }  // from tokenizer_config.json, "" when absent
  const std::string& eos_token() const { return eos_token_; }
  // The files it was read from (name, bytes): saved with a checkpoint so the checkpoint carries its tokenizer.
  const std::vector<std::pair<std::string, std::string>>& files() const { return files_; }

 private:
  void read_config(const std::string& dir, std::string* added_tokens_decoder_json);
  Format format_ = Format::kTiktoken;
  AddedTokens added_;
  Pretokenizer pre_;
  ByteBpe bpe_;
  std::vector<std::string> surface_, pieces_;
  std::string bos_token_, eos_token_;
  std::vector<std::pair<std::string, std::string>> files_;
  bool nfc_ = false;  // Hugging Face normalizer NFC: each run between added tokens is normalized first
};

}  // namespace myriad
