// `myriad logits`: one forward pass of a checkpoint on given token ids, written as safetensors: the hook by
// which anyone checks myriad against another implementation. With --targets also the loss, and with --grads
// every parameter's gradient (grad.<name>).
#include <cstdio>
#include <sstream>

#include "cli.h"
#include "infer/weight_layout.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "model/vision_tower.h"
#include "vision_input.h"

namespace {

std::vector<int64_t> parse_ids(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    MYRIAD_REQUIRE(!item.empty() && end && *end == '\0', kValue, "--", flag, ": '", item,
                   "' is not an integer (expected a comma-separated list like 1,2,3)");
    out.push_back(v);
  }
  MYRIAD_REQUIRE(!out.empty(), kValue, "--", flag, ": empty list");
  return out;
}

int run_logits(const myriad::cli::Args& args) {
  using namespace myriad;
  const auto model_dir = args.get("model");
  const auto out = args.get("out");
  const auto tokens_arg = args.get("tokens");
  MYRIAD_REQUIRE(model_dir && out && tokens_arg, kValue, "logits needs --model DIR, --tokens LIST and --out FILE");
  // A run reads as its latest checkpoint, as in every command that takes --model.
  const std::string dir = model_or_latest_checkpoint(*model_dir);
  std::vector<std::string> warnings;
  ModelConfig config = load_model_config(dir, &warnings);
  Checkpoint ckpt = open_model_checkpoint(dir, config);
  Transformer model(config, ModelWeights::from_checkpoint(ckpt, config));
  const std::vector<int64_t> ids = parse_ids("tokens", *tokens_arg);
  Tensor tokens = Tensor::from_vector(ids, {int64_t(ids.size())});
  Tensor targets;
  if (auto t = args.get("targets")) {
    const std::vector<int64_t> tg = parse_ids("targets", *t);
    MYRIAD_REQUIRE(tg.size() == ids.size(), kValue, "--targets has ", tg.size(), " ids but --tokens has ", ids.size());
    targets = Tensor::from_vector(tg, {int64_t(tg.size())});
  }
  const bool grads = args.has("grads");
  MYRIAD_REQUIRE(!grads || targets.defined(), kValue, "--grads needs --targets (the gradient of the loss)");
  ForwardOptions opt;
  opt.kda_chunk = args.get_int("chunk", 64, 1, 1 << 20);
  opt.checkpoint_layers = args.has("checkpoint");
  std::optional<ag::NoGradGuard> no_grad;
  if (!grads) no_grad.emplace();
  ag::Var image_features;
  if (auto images = args.get("images")) {
    MYRIAD_REQUIRE(config.vision_config.has_value(), kValue, "--images: the model in ", dir,
                   " has no vision tower (its config.json has no vision_config)");
    const SafetensorsFile in = SafetensorsFile::open(*images);
    const ag::Var patches(cli::patch_file_tensor(in, "patches", DType::kF32, 2));
    image_features = encode_images(*config.vision_config, model.weights(), patches, cli::patch_file_grids(in));
    opt.image_features = &image_features;
  }
  ForwardResult r = model.forward(tokens, targets, opt);
  NamedTensors tensors;
  tensors.emplace_back("logits", model.logits(r.hidden));
  if (targets.defined()) tensors.emplace_back("loss", r.loss.value());
  if (grads) {
    ag::backward(r.loss);
    for (const auto& [name, v] : model.weights().all()) {
      if (!v.requires_grad()) continue;
      tensors.emplace_back("grad." + name, v.has_grad() ? v.grad() : Tensor::zeros(v.shape()));
    }
  }
  save_safetensors(*out, tensors);
  std::printf("wrote %s: logits [%lld, %lld]%s%s\n", out->c_str(), (long long)ids.size(), (long long)config.vocab_size,
              targets.defined() ? ", loss" : "", grads ? ", parameter gradients" : "");
  if (targets.defined()) std::printf("loss %.6f\n", double(r.loss.value().data<float>()[0]));
  return 0;
}

}  // namespace

MYRIAD_COMMAND("logits", "run one forward pass and write the logits (and loss, gradients) as safetensors",
               "myriad logits --model DIR --tokens 1,2,3 --out FILE.safetensors [--targets 2,3,-100] [--grads] "
               "[--images FILE]",
               {{"model", "DIR",
                 "a model directory (config.json + model.safetensors) or a run (its latest checkpoint)"},
                {"tokens", "LIST", "comma-separated token ids"},
                {"images", "FILE",
                 "images for the media placeholder tokens: a patch file as `myriad vision encode` "
                 "reads (patches, grids); their tokens replace the placeholders in order"},
                {"targets", "LIST", "comma-separated next-token targets (-100 = ignore): also write the loss"},
                {"grads", "", "also write every parameter's gradient of the loss (grad.<name>)"},
                {"chunk", "N", "KDA chunk size (default 64)"},
                {"checkpoint", "", "gradient checkpointing per layer (recompute in backward)"},
                {"out", "FILE", "output .safetensors (logits [T, vocab] f32, loss [], grad.*)"}},
               run_logits);
