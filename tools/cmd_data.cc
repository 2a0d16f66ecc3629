// `myriad data prepare --tokenizer DIR --data PATH... --out DIR [--val-fraction F] [--split-by position|document]
// [--shard-tokens N] [--force]`: tokenizes text / JSONL files into token shards + meta.json (train/shards.h).
// A progress bar goes to stderr when it is a terminal; the summary to stdout.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "data/shards.h"
#include "data/tokenizer.h"

namespace {

int run_prepare(const myriad::cli::Args& args) {
  const auto tok = args.get("tokenizer");
  MYRIAD_REQUIRE(tok.has_value(), kValue, "data prepare needs --tokenizer DIR (make one with myriad tokenizer train)");
  std::vector<std::string> paths;
  if (auto d = args.get("data")) paths.push_back(*d);
  for (size_t i = 1; i < args.positional().size(); ++i) paths.push_back(args.positional()[i]);
  MYRIAD_REQUIRE(!paths.empty(), kValue, "data prepare needs --data PATH... (text files, JSONL or directories)");
  const auto out = args.get("out");
  MYRIAD_REQUIRE(out.has_value(), kValue, "data prepare needs --out DIR");
  myriad::PrepareOptions opt;
  opt.val_fraction = args.get_double("val-fraction", 0.1, 0, 1, false, /*open_max=*/true);
  opt.split_by = myriad::parse_split_by(args.get_or("split-by", "position"));
  opt.shard_tokens = args.get_int("shard-tokens", long(myriad::kDefaultShardTokens), 1, 1L << 40);
  opt.force = args.has("force");
  opt.progress = !args.has("no-progress");
  opt.tokenizer_path = *tok;
  const myriad::Tokenizer t = myriad::Tokenizer::load(*tok);
  const myriad::PrepareResult r = myriad::prepare_data(t, paths, *out, opt);
  std::printf("wrote %s: %lld file(s), %llu bytes, vocab %lld (%s shards)\n", out->c_str(),
              static_cast<long long>(r.files), static_cast<unsigned long long>(r.bytes),
              static_cast<long long>(t.vocab_size()), r.meta.value("dtype", "").c_str());
  for (const auto* s : {&r.train, &r.val}) {
    std::printf("  %-5s %12lld tokens  %8lld documents  %12llu bytes  %zu shard(s)\n", s == &r.train ? "train" : "val",
                static_cast<long long>(s->tokens), static_cast<long long>(s->documents),
                static_cast<unsigned long long>(s->bytes), s->shards.size());
  }
  if (r.empty_documents > 0)
    std::printf("  %lld empty document(s) left out\n", static_cast<long long>(r.empty_documents));
  if (r.skipped.count > 0) std::printf("  %s\n", r.skipped.describe().c_str());
  return 0;
}

int run_data(const myriad::cli::Args& args) {
  MYRIAD_REQUIRE(!args.positional().empty(), kValue, "data needs an action: prepare (see myriad data --help)");
  const std::string& action = args.positional()[0];
  if (action == "prepare") return run_prepare(args);
  myriad::throw_error(myriad::ErrorKind::kValue, "data: unknown action '", action, "' (prepare)");
}

}  // namespace

MYRIAD_COMMAND("data", "tokenize text / JSONL into token shards for training (train-*.bin, val-*.bin, meta.json)",
               "myriad data prepare --tokenizer DIR --data PATH... --out DIR [--val-fraction F] "
               "[--split-by position|document] [--shard-tokens N] [--force]",
               {{"tokenizer", "DIR", "tokenizer directory (myriad tokenizer train)"},
                {"data", "PATH...", "text files (one document each), JSONL files (\"text\" per line) or directories"},
                {"out", "DIR", "output directory (created atomically; an existing non-empty one needs --force)"},
                {"val-fraction", "F", "fraction of the data for validation, in [0, 1) (default 0.1)"},
                {"split-by", "MODE",
                 "position: the last F of each file's bytes (default); document: every 1/F-th document"},
                {"shard-tokens", "N", "tokens per shard at most (default 67108864)"},
                {"force", "", "replace an existing non-empty output directory"},
                {"no-progress", "", "no progress bar on stderr"}},
               run_data);
