// `myriad vision encode`: a checkpoint's vision tower and projector on given patches, written as safetensors:
// the image features the text model would receive, and with --grads the gradient of sum(features * cotangent)
// for every vision tensor and for the patches. The hook by which the tower is checked against another
// implementation (tests/model/vision_parity.py) and by which a user inspects what an image becomes.
// `myriad vision patch`: image files as the model's preprocessing turns them into patches (the input of encode),
// checked against K3's reference processor by tests/model/image_preprocess.py.
#include <cstdio>

#include "cli.h"
#include "data/media/image.h"
#include "infer/image_input.h"
#include "infer/weight_layout.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "io/safetensors.h"
#include "model/param_spec.h"
#include "model/transformer.h"
#include "model/vision_tower.h"
#include "vision_input.h"

namespace {

using namespace myriad;

// The images as the model's preprocessing patches them: patches f32 [L, 3 p p], grids i64 [images, 2] (h, w in
// patches), content i64 [images, 2] (the resized image's width and height inside its grid), tokens i64 [images].
int run_patch(const cli::Args& args) {
  const auto model_dir = args.get("model");
  const auto out = args.get("out");
  const std::vector<std::string> files(args.positional().begin() + 1, args.positional().end());
  MYRIAD_REQUIRE(model_dir && out && !files.empty(), kValue, "vision patch needs --model DIR, --out FILE and images");
  // A run reads as its latest checkpoint, as in every command that takes --model.
  const std::string dir = model_or_latest_checkpoint(*model_dir);
  const ModelConfig config = load_model_config(dir, nullptr);
  MYRIAD_REQUIRE(config.vision_config.has_value(), kValue, "vision patch: the model in ", dir,
                 " has no vision tower (its config.json has no vision_config)");
  const VisionConfig& vc = *config.vision_config;
  const PatchOptions o = patch_options_for(vc);
  ImageInput in;
  std::vector<int64_t> grids, content;
  for (const std::string& f : files) {
    const Image image = read_image_file(f);
    const PatchPlan plan = plan_patches(image.width, image.height, o);
    add_image(in, vc, image);
    grids.insert(grids.end(), {plan.grid_h, plan.grid_w});
    content.insert(content.end(), {plan.content_w, plan.content_h});
  }
  const int64_t n = int64_t(files.size());
  NamedTensors tensors;
  tensors.emplace_back("patches", in.patches(vc));
  tensors.emplace_back("grids", Tensor::from_vector(grids, {n, 2}));
  tensors.emplace_back("content", Tensor::from_vector(content, {n, 2}));
  tensors.emplace_back("tokens", Tensor::from_vector(in.tokens, {n}));
  save_safetensors(*out, tensors);
  std::printf("wrote %s: %lld patch rows for %lld image(s) (%s)\n", out->c_str(),
              static_cast<long long>(in.patches(vc).shape()[0]), static_cast<long long>(n),
              o.fit == ImageFit::kScaleAndPad ? "scaled down and padded, as K3's processor" : "stretched to windows");
  return 0;
}

int run_vision(const cli::Args& args) {
  const auto& pos = args.positional();
  if (!pos.empty() && pos[0] == "patch") return run_patch(args);
  MYRIAD_REQUIRE(pos.size() == 1 && pos[0] == "encode", kValue,
                 "usage: myriad vision encode --model DIR --input FILE --out FILE [--grads] | "
                 "myriad vision patch --model DIR --out FILE IMAGE... (the subcommands are 'encode' and 'patch')");
  const auto model_dir = args.get("model");
  const auto input = args.get("input");
  const auto out = args.get("out");
  MYRIAD_REQUIRE(model_dir && input && out, kValue, "vision encode needs --model DIR, --input FILE and --out FILE");
  // A run reads as its latest checkpoint, as in every command that takes --model.
  const std::string dir = model_or_latest_checkpoint(*model_dir);
  std::vector<std::string> warnings;
  const ModelConfig config = load_model_config(dir, &warnings);
  MYRIAD_REQUIRE(config.vision_config.has_value(), kValue, "vision encode: the model in ", dir,
                 " has no vision tower (its config.json has no vision_config)");
  const VisionConfig& vc = *config.vision_config;
  Checkpoint ckpt = open_model_checkpoint(dir, config);
  const ModelWeights weights = ModelWeights::from_checkpoint(ckpt, config);

  const SafetensorsFile in = SafetensorsFile::open(*input);
  const Tensor patches = cli::patch_file_tensor(in, "patches", DType::kF32, 2);
  const std::vector<PatchGrid> grids = cli::patch_file_grids(in);

  const bool grads = args.has("grads");
  std::optional<ag::NoGradGuard> no_grad;
  if (!grads) no_grad.emplace();
  const ag::Var px(patches, /*requires_grad=*/grads);
  const ag::Var features = encode_images(vc, weights, px, grids);
  NamedTensors tensors;
  tensors.emplace_back("features", features.value());
  if (grads) {
    const Tensor cot = cli::patch_file_tensor(in, "cotangent", DType::kF32, 2);
    MYRIAD_REQUIRE(cot.shape() == features.shape(), kValue, "vision encode: 'cotangent' must have the features' shape ",
                   shape_str(features.shape()), ", got ", shape_str(cot.shape()));
    ag::backward(ag::sum(ag::mul(features, ag::Var(cot))));
    tensors.emplace_back("grad.patches", px.grad());
    for (const ParamSpec& s : model_param_specs(config)) {
      if (s.component != Component::kVision && s.component != Component::kProjector) continue;
      const ag::Var& v = weights.at(s.name);
      tensors.emplace_back("grad." + s.name, v.has_grad() ? v.grad() : Tensor::zeros(v.shape()));
    }
  }
  save_safetensors(*out, tensors);
  std::printf("wrote %s: features %s for %zu image(s)%s\n", out->c_str(), shape_str(features.shape()).c_str(),
              grids.size(), grads ? ", gradients of every vision tensor and the patches" : "");
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "vision",
    "run a checkpoint's vision tower and projector on patches (features, gradients), or patch images as "
    "its preprocessing does",
    "myriad vision encode --model DIR --input FILE.safetensors --out FILE.safetensors [--grads]\n"
    "       myriad vision patch --model DIR --out FILE.safetensors IMAGE...",
    {{"model", "DIR", "a model directory whose config.json has a vision_config, or a run (its latest checkpoint)"},
     {"input", "FILE",
      "safetensors with patches f32 [L, 3 p p] ((channel, row, col) per patch, "
      "images one after another, row-major), grids i64 [images, 2] (h, w in patches) "
      "and, with --grads, cotangent f32 [tokens, hidden_size]"},
     {"grads", "",
      "also write grad.patches and grad.<name> of every vision tensor for "
      "the loss sum(features * cotangent)"},
     {"out", "FILE",
      "output .safetensors: encode: features [tokens, hidden_size] (+ grad.*); patch: patches f32 [L, 3 p p], "
      "grids i64 [images, 2] (h, w in patches), content i64 [images, 2] (the resized image's w, h inside "
      "its grid; the rest is padding), tokens i64 [images]"}},
    run_vision);
