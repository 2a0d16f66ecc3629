// The tokenizer (docs/training.md). Three kinds behind one interface:
//   - SentencePiece BPE with byte fallback, myriad's own: trained and used through libsentencepiece, with a thin
//     layer of our own around it so that any byte string round-trips (described below);
//   - Kimi's tiktoken format (tiktoken.model + tokenizer_config.json) and Hugging Face's byte-level BPE
//     (tokenizer.json): the tokenizers published checkpoints ship, read from their own files (bpe_tokenizer.h).
// load() picks the kind from the files it finds (see there); the fixed layout below is the SentencePiece kind's.
//
// SentencePiece: decode(encode(s)) == s for every s, invalid UTF-8 included.
//
// Vocabulary layout (fixed; checked when a model is loaded):
//   0 <unk>, 1 <s>, 2 </s>                                    SentencePiece control tokens (never produced by encode)
//   3 <|endoftext|> 4 <|system|> 5 <|user|> 6 <|assistant|>    user-defined symbols, in this order
//   7 <|tool_call|> 8 <|/tool_call|> 9 <|tool_result|> 10 <|/tool_result|> 11 <|image|>
//   12..267 <0x00>..<0xFF>                                     byte-fallback tokens
//   268..  the learned BPE pieces
//
// Training: model_type=bpe, byte_fallback, normalization_rule_name=identity, add_dummy_prefix=false,
// remove_extra_whitespaces=false (the text is not altered at all), split_digits=true (every digit its own token,
// for arithmetic), the special tokens as user_defined_symbols. Training text is cut into sentences at newlines
// (a newline is therefore never inside a learned piece; it encodes as the byte token <0x0A>); sentences longer
// than options.max_sentence_bytes are cut. When there are more than options.max_sentences sentences, a uniform
// sample of that many is taken by reservoir sampling with std::mt19937_64(options.seed) (our own sampler, not
// SentencePiece's, whose thread-local generator is seeded only once per thread); SentencePiece's own shuffle is
// off. The result is a pure function of (input, vocab size, options): training twice gives the same model bytes.
//
// NOTE (round trip): SentencePiece alone does not round-trip arbitrary bytes: its normalizer replaces each invalid
// UTF-8 byte with U+FFFD, and it decodes a literal U+2581 ('▁', its whitespace marker) as a space. encode()
// therefore routes those bytes around SentencePiece: every byte of an ill-formed UTF-8 sequence (Unicode table
// 3-7: overlongs, surrogates, > U+10FFFF and truncated sequences are ill-formed) and the three bytes of each U+2581
// are emitted as byte tokens <0xNN> directly; the valid text between them goes through SentencePiece. '\n' is
// also emitted directly as <0x0A> (it is never inside a piece, see above), which cuts long texts into short
// SentencePiece calls. decode() is ours too: it concatenates each token's bytes (a byte token: its byte; a
// special token: its text; a learned piece: its text with '▁' read as ' '; <unk>, <s>, </s>: nothing), without
// SentencePiece's UTF-8 repair of byte runs. Training text gets the same treatment (cut at those bytes).
//
// Special tokens in text: with Specials::kParse (the default; raw prompts, training text) the text of a special
// token inside the input ("<|user|>") encodes as that single token, as SentencePiece matches user-defined symbols
// everywhere. With Specials::kAsText (message content in the chat template: users and tools must not be able to
// forge a turn) it encodes as ordinary text: the '<' that starts each occurrence is emitted as the byte token
// <0x3C> and the rest ("|user|>") goes through SentencePiece, where no special token can match any more. Both
// round-trip. <unk>, <s>, </s> are never matched in text.
//
// Leaves out: sampling (subword regularisation), other model types, normalization of any kind.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace myriad {

inline constexpr int32_t kUnkId = 0;
inline constexpr int32_t kBosId = 1;
inline constexpr int32_t kEosId = 2;
inline constexpr int32_t kFirstSpecialId = 3;
// The reserved special tokens, ids kFirstSpecialId + i.
inline constexpr std::array<const char*, 9> kSpecialTokens = {"<|endoftext|>",   "<|system|>",       "<|user|>",
                                                              "<|assistant|>",   "<|tool_call|>",    "<|/tool_call|>",
                                                              "<|tool_result|>", "<|/tool_result|>", "<|image|>"};
inline constexpr int32_t kEndOfTextId = kFirstSpecialId;  // separates documents in token shards
inline constexpr int32_t kFirstByteId = kFirstSpecialId + int32_t(kSpecialTokens.size());  // <0x00>
inline constexpr int64_t kMinVocabSize = kFirstByteId + 256 + 1;  // specials, bytes, and at least one piece

inline constexpr const char* kTokenizerModelFile = "tokenizer.model";
inline constexpr const char* kTokenizerJsonFile = "tokenizer.json";

struct TokenizerTrainOptions {
  uint64_t seed = 0;                   // for the sentence sample
  int64_t max_sentences = 2'000'000;   // a larger input is sampled down to this many sentences
  int64_t max_sentence_bytes = 4096;   // longer lines are cut (at a space when there is one)
  double character_coverage = 0.9995;  // rarer characters are left to byte fallback
  // SentencePiece trainer threads. NOTE: the count is recorded in the model's trainer_spec, so it is part of the
  // model bytes; 1 keeps them identical on every machine (the BPE merges themselves do not depend on it).
  int num_threads = 1;
};

// How encode() treats the text of the special tokens (see the top of this file).
enum class Specials { kParse, kAsText };

enum class TokenizerKind { kSentencePiece, kTiktoken, kHuggingFaceBpe };
const char* tokenizer_kind_name(TokenizerKind kind);  // "sentencepiece", "tiktoken", "huggingface-bpe"

class BpeTokenizer;

// Where a model's tokenizer is, when none is given: checkpoint_dir/tokenizer (myriad's checkpoints), then
// run_dir/tokenizer (a training run; skipped when empty), then checkpoint_dir itself when it holds tokenizer.model,
// tiktoken.model or tokenizer.json (published checkpoints keep them beside config.json). Throws kIo naming every
// place it looked and the --tokenizer flag otherwise.
std::string find_model_tokenizer(const std::string& checkpoint_dir, const std::string& run_dir = "");

class Tokenizer {
 public:
  Tokenizer() = default;

  // Trains on text files, JSONL files (each line's "text") and directories of them (data/tokenize/data_files.h,
  // collect_data_files), saves into out_dir (save()) and returns the tokenizer. vocab_size is an upper bound: when
  // the text runs out of pairs to merge first, the vocabulary is smaller (a warning says so; vocab_size() and
  // tokenizer.json give the real size). Throws kIo for a missing path, kValue for no training text, a vocab_size
  // outside [kMinVocabSize, 2^24], or one too small for the text's characters (SentencePiece's message).
  // Memory: the sample holds at most max_sentences x max_sentence_bytes bytes (typically ~100 bytes a line).
  static Tokenizer train(const std::vector<std::string>& paths, int64_t vocab_size, const std::string& out_dir,
                         const TokenizerTrainOptions& options = {});
  // Trains on in-memory text (each string is cut into sentences at newlines); saves nothing.
  static Tokenizer train_from_texts(const std::vector<std::string>& texts, int64_t vocab_size,
                                    const TokenizerTrainOptions& options = {});
  // `path`: a directory or a file. A directory is read as the first of
  //   tokenizer.model   myriad's SentencePiece (with tokenizer.json, myriad's, checked against it when present);
  //   tiktoken.model    Kimi's tiktoken format (with tokenizer_config.json when present);
  //   tokenizer.json    Hugging Face's byte-level BPE (with tokenizer_config.json when present).
  // A file is read by its name: tiktoken.model, *.json (Hugging Face), anything else SentencePiece.
  // Throws kIo naming where it looked when there is none, kFormat / kUnsupported naming the file otherwise.
  static Tokenizer load(const std::string& path);
  // A serialized SentencePiece ModelProto; `source` names it in errors.
  static Tokenizer from_model_bytes(std::string model_bytes, const std::string& source = "tokenizer.model");

  // Writes the tokenizer's files into dir (each atomically; the directory is created if missing). SentencePiece:
  // tokenizer.model and tokenizer.json = {"type":"sentencepiece-bpe","vocab_size":N,"special_tokens":{name:id},
  // "hash":"..."}. The other kinds: the files they were read from, unchanged.
  void save(const std::string& dir) const;

  std::vector<int32_t> encode(std::string_view text, Specials specials = Specials::kParse) const;
  // Throws kValue for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes one token decodes to (for streaming output; may be part of a UTF-8 character).
  const std::string& token_bytes(int32_t id) const;
  // The token as its vocabulary writes it: SentencePiece's piece ("▁the", "<0x0A>", "<|user|>"), Hugging Face's
  // ByteLevel string ("Ġthe"), tiktoken's bytes; a special token's text.
  std::string piece(int32_t id) const;

  // Id of a special token: SentencePiece: "<unk>", "<s>", "</s>" or one of kSpecialTokens; the other kinds: any
  // added / special token by its text. Throws kValue otherwise.
  int32_t id_of(std::string_view special) const;
  bool has_special(std::string_view special) const;
  // The token of one byte (SentencePiece's byte-fallback token; the BPE kinds' single-byte token).
  int32_t byte_id(uint8_t byte) const;
  int64_t vocab_size() const;
  TokenizerKind kind() const;
  // The token that ends a document (separates documents in token shards, starts an empty prompt):
  // SentencePiece's <|endoftext|>; the other kinds' eos_token from tokenizer_config.json. -1 when there is none.
  int32_t end_of_text_id() const;
  // The tokens that end a generation at "end of sequence": SentencePiece's <|endoftext|> and </s>; the other
  // kinds' eos_token (empty when tokenizer_config.json names none).
  const std::vector<int32_t>& stop_ids() const;

  // The byte-level BPE behind the tiktoken and Hugging Face kinds (its vocabulary, merges, pre-tokenizer), or
  // null for SentencePiece.
  const BpeTokenizer* bpe() const;

  bool loaded() const { return impl_ != nullptr; }
  // The serialized model (tokenizer.model's bytes) and its hash "fnv1a64:<16 hex digits>".
  const std::string& model_bytes() const;
  const std::string& hash() const;

 private:
  static Tokenizer from_bpe(BpeTokenizer bpe);
  struct Impl;
  std::shared_ptr<const Impl> impl_;  // immutable once built: copies share it, encode/decode are thread-safe
  const Impl& impl() const;
};

}  // namespace myriad
