// `myriad data prepare --tokenizer DIR --data PATH... --out DIR [--val-fraction F] [--split-by position|document]
// [--shard-tokens N] [--force]`: tokenizes text / JSONL files into token shards + meta.json (train/shards.h);
// `myriad data prepare --data RECORDS.jsonl --out DIR` with image-text records decodes their images once into an
// image store beside the rewritten records (data/datasets/image_store.h).
// A progress bar goes to stderr when it is a terminal; the summary to stdout.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "data/datasets/image_datasets.h"
#include "data/datasets/image_store.h"
#include "data/datasets/image_text_records.h"
#include "data/datasets/prepare.h"
#include "data/datasets/shards.h"
#include "data/tokenize/tokenizer.h"

namespace {

// Image-text records: their images decoded once into a store beside the rewritten records
// (data/datasets/image_store.h).
int run_prepare_images(const std::string& records, const std::string& out, bool force) {
  const auto t0 = std::chrono::steady_clock::now();
  const myriad::ImageTextPrepareResult r = myriad::prepare_image_text(records, out, force);
  std::printf("wrote %s: %lld records, %lld images (%lld references), %.1f MB of pixels, in %.1f s\n", out.c_str(),
              static_cast<long long>(r.records), static_cast<long long>(r.images), static_cast<long long>(r.references),
              double(r.pixel_bytes) / 1e6,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

int run_prepare(const myriad::cli::Args& args) {
  std::vector<std::string> paths;
  if (auto d = args.get("data")) paths.push_back(*d);
  for (size_t i = 1; i < args.positional().size(); ++i) paths.push_back(args.positional()[i]);
  MYRIAD_REQUIRE(!paths.empty(), kValue, "data prepare needs --data PATH... (text files, JSONL or directories)");
  const auto out = args.get("out");
  MYRIAD_REQUIRE(out.has_value(), kValue, "data prepare needs --out DIR");
  if (std::filesystem::is_regular_file(paths[0]) && myriad::is_image_text_file(paths[0])) {
    MYRIAD_REQUIRE(paths.size() == 1, kValue, "data prepare: image-text records (", paths[0],
                   ") are prepared alone (one file)");
    return run_prepare_images(paths[0], *out, args.has("force"));
  }
  const auto tok = args.get("tokenizer");
  MYRIAD_REQUIRE(tok.has_value(), kValue, "data prepare needs --tokenizer DIR (make one with myriad tokenizer train)");
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

void print_summary(const std::string& dir, const myriad::ImageDatasetSummary& s) {
  std::printf("wrote %s/train.jsonl (%lld questions) and %s/test.jsonl (%lld), %.1f MB, images inline as PNG\n",
              dir.c_str(), static_cast<long long>(s.train), dir.c_str(), static_cast<long long>(s.test),
              double(s.bytes) / 1e6);
}

int run_shapes(const myriad::cli::Args& args) {
  const auto out = args.get("out");
  MYRIAD_REQUIRE(out.has_value(), kValue, "data shapes needs --out DIR");
  const auto s = myriad::write_shape_dataset(*out, args.get_int("train", 4000, 1, 1 << 24),
                                             args.get_int("test", 400, 1, 1 << 24), args.get_int("size", 56, 16, 4096));
  print_summary(*out, s);
  return 0;
}

int run_motion(const myriad::cli::Args& args) {
  const auto out = args.get("out");
  MYRIAD_REQUIRE(out.has_value(), kValue, "data motion needs --out DIR");
  const auto s =
      myriad::write_motion_dataset(*out, args.get_int("train", 4000, 1, 1 << 24), args.get_int("test", 400, 1, 1 << 24),
                                   args.get_int("size", 28, 16, 4096), args.get_int("frames", 4, 2, 64));
  std::printf("wrote %s/train.jsonl (%lld questions) and %s/test.jsonl (%lld), %.1f MB, frames inline as PNG\n",
              out->c_str(), static_cast<long long>(s.train), out->c_str(), static_cast<long long>(s.test),
              double(s.bytes) / 1e6);
  return 0;
}

// The IDX pair of a folder: its one *images-idx3-ubyte[.gz] and *labels-idx1-ubyte[.gz] file.
std::string find_idx(const std::string& dir, const std::string& kind) {
  std::string found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(kind) == std::string::npos) continue;
    MYRIAD_REQUIRE(found.empty(), kValue, "--idx ", dir, ": more than one ", kind, " file (", found, ", ", name,
                   "): give --images and --labels");
    found = e.path().string();
  }
  MYRIAD_REQUIRE(!ec, kIo, "--idx ", dir, ": cannot list the folder: ", ec.message());
  MYRIAD_REQUIRE(!found.empty(), kValue, "--idx ", dir, ": no *", kind, " file");
  return found;
}

int run_mnist(const myriad::cli::Args& args) {
  const auto out = args.get("out");
  MYRIAD_REQUIRE(out.has_value(), kValue, "data mnist needs --out DIR");
  std::string images = args.get_or("images", ""), labels = args.get_or("labels", "");
  if (const auto idx = args.get("idx")) {
    if (images.empty()) images = find_idx(*idx, "images-idx3-ubyte");
    if (labels.empty()) labels = find_idx(*idx, "labels-idx1-ubyte");
  }
  MYRIAD_REQUIRE(!images.empty() && !labels.empty(), kValue,
                 "data mnist needs --idx DIR (MNIST's files) or --images FILE and --labels FILE");
  const auto s = myriad::write_mnist_dataset(images, labels, *out, args.get_int("train", 9000, 1, 1 << 30),
                                             args.get_int("test", -1, -1, 1 << 30));
  print_summary(*out, s);
  return 0;
}

int run_data(const myriad::cli::Args& args) {
  MYRIAD_REQUIRE(!args.positional().empty(), kValue,
                 "data needs an action: prepare, shapes, motion or mnist (see myriad data --help)");
  const std::string& action = args.positional()[0];
  if (action == "prepare") return run_prepare(args);
  if (action == "shapes") return run_shapes(args);
  if (action == "motion") return run_motion(args);
  if (action == "mnist") return run_mnist(args);
  myriad::throw_error(myriad::ErrorKind::kValue, "data: unknown action '", action,
                      "' (prepare, shapes, motion, mnist)");
}

}  // namespace

MYRIAD_COMMAND(
    "data",
    "tokenize text / JSONL into token shards for training (train-*.bin, val-*.bin, meta.json); decode image-text "
    "records' images once into an image store (images.safetensors + image_text.jsonl); write image-question sets "
    "(shapes, MNIST) and video-question sets (motion clips) as image-text JSONL",
    "myriad data prepare --tokenizer DIR --data PATH... --out DIR [--val-fraction F] "
    "[--split-by position|document] [--shard-tokens N] [--force] | "
    "myriad data prepare --data RECORDS.jsonl --out DIR [--force] | "
    "myriad data shapes --out DIR [--train N] [--test N] [--size PX] | "
    "myriad data motion --out DIR [--train N] [--test N] [--size PX] [--frames N] | "
    "myriad data mnist --idx DIR | --images FILE --labels FILE --out DIR [--train N] [--test N]",
    {{"tokenizer", "DIR", "tokenizer directory (myriad tokenizer train); not for image-text records"},
     {"data", "PATH...", "text files (one document each), JSONL files (\"text\" per line) or directories"},
     {"out", "DIR", "output directory (created atomically; an existing non-empty one needs --force)"},
     {"val-fraction", "F", "fraction of the data for validation, in [0, 1) (default 0.1)"},
     {"split-by", "MODE", "position: the last F of each file's bytes (default); document: every 1/F-th document"},
     {"shard-tokens", "N", "tokens per shard at most (default 67108864)"},
     {"force", "", "replace an existing non-empty output directory"},
     {"no-progress", "", "no progress bar on stderr"},
     {"train", "N",
      "shapes, motion: train scenes / clips (default 4000); mnist: the first N images train (default 9000)"},
     {"test", "N",
      "shapes, motion: test scenes / clips (default 400); mnist: test images after the train ones (default all)"},
     {"size", "PX", "shapes: scene size in pixels (default 56); motion: frame size (default 28)"},
     {"frames", "N", "motion: frames per clip (default 4)"},
     {"idx", "DIR", "mnist: a folder with MNIST's *images-idx3-ubyte[.gz] and *labels-idx1-ubyte[.gz]"},
     {"images", "FILE", "mnist: the images IDX file"},
     {"labels", "FILE", "mnist: the labels IDX file"}},
    run_data);
