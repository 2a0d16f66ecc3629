// `myriad convert --in PATH --out FILE [--dtype f32|bf16|f16]`: reads a safetensors file or checkpoint directory
// and writes one safetensors file (atomically), with the tensors in the input's order and its metadata kept.
// With --dtype, floating tensors (F32, BF16, F16) are cast to that type; integer tensors are copied unchanged.
// The input is streamed: one tensor is converted and written at a time, so memory stays at one tensor.
//   NOTE: casts go through f32 (exact for bf16/f16 -> f32) and round to nearest even (f32_to_bf16 /
//   f32_to_f16), matching torch's .to(torch.bfloat16) / .to(torch.float16) bit for bit on finite values and
//   infinities (tests/interop). NaN stays NaN: f16 gives sign | 0x7E00 as torch does; bf16 keeps sign and
//   payload (quieted), where torch 1.13 gives 0xFFFF (vectorised) or 0x7FC0 (scalar).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "deploy/layout_convert.h"
#include "io/checkpoint.h"

namespace {

using myriad::DType;
using myriad::Tensor;

bool is_floating(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

float load_float(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kBF16:
      return myriad::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return myriad::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}

// Element-wise cast between floating dtypes of a contiguous cpu tensor.
Tensor cast_floating(const Tensor& in, DType to) {
  const Tensor src = in.contiguous();
  Tensor out = Tensor::empty(src.shape(), to);
  const int64_t n = src.numel();
  if (n == 0) return out;
  const void* s = src.raw_data();
  void* d = out.raw_data();
  const DType from = src.dtype();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float x = load_float(s, from, i);
    if (to == DType::kF32)
      static_cast<float*>(d)[i] = x;
    else if (to == DType::kBF16)
      static_cast<uint16_t*>(d)[i] = myriad::f32_to_bf16(x);
    else
      static_cast<uint16_t*>(d)[i] = myriad::f32_to_f16(x);
  }
  return out;
}

int run_convert(const myriad::cli::Args& args) {
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "convert takes no positional arguments (got '",
                 args.positional().empty() ? "" : args.positional()[0], "'); use --in and --out");
  const auto in = args.get("in");
  const auto out = args.get("out");
  MYRIAD_REQUIRE(in && !in->empty(), kValue, "convert needs --in PATH (a .safetensors file or checkpoint directory)");
  MYRIAD_REQUIRE(out && !out->empty(), kValue, "convert needs --out FILE (the .safetensors file to write)");
  std::optional<DType> target;
  if (const auto d = args.get("dtype")) {
    if (*d == "f32" || *d == "F32")
      target = DType::kF32;
    else if (*d == "bf16" || *d == "BF16")
      target = DType::kBF16;
    else if (*d == "f16" || *d == "F16")
      target = DType::kF16;
    else
      myriad::throw_error(myriad::ErrorKind::kValue, "--dtype ", *d, ": must be one of f32, bf16, f16");
  }

  if (const auto to = args.get("to")) {  // a model in another project's layout (a directory)
    const myriad::LayoutConvertReport r = myriad::convert_model_layout(*in, *out, myriad::parse_layout_target(*to),
                                                                       target.value_or(DType::kF32), args.has("force"));
    std::printf("converted %s to the %s layout in %s: %lld tensors, %llu data bytes\n", in->c_str(), to->c_str(),
                out->c_str(), static_cast<long long>(r.tensors), static_cast<unsigned long long>(r.bytes));
    return 0;
  }
  const myriad::Checkpoint ck = myriad::Checkpoint::open(*in);
  std::vector<myriad::TensorSpec> specs;
  uint64_t in_bytes = 0, out_bytes = 0;
  size_t cast = 0;
  for (const std::string& name : ck.names()) {
    const auto& e = ck.entry(name);
    DType d = e.dtype;
    if (target && is_floating(d) && d != *target) {
      d = *target;
      ++cast;
    }
    specs.push_back({name, d, e.shape});
    in_bytes += e.bytes();
    out_bytes += *myriad::dtype_bytes(d, uint64_t(e.numel()));
  }
  myriad::save_safetensors(
      *out, specs,
      [&](size_t i) {
        Tensor t = ck.tensor(specs[i].name);
        return t.dtype() == specs[i].dtype ? t : cast_floating(t, specs[i].dtype);
      },
      ck.metadata());
  std::printf("converted %zu tensors (%zu cast to %s) from %s to %s: %llu -> %llu data bytes\n", specs.size(), cast,
              target ? myriad::dtype_name(*target) : "-", in->c_str(), out->c_str(),
              static_cast<unsigned long long>(in_bytes), static_cast<unsigned long long>(out_bytes));
  return 0;
}

}  // namespace

MYRIAD_COMMAND("convert",
               "copy a safetensors file or checkpoint into one safetensors file, optionally casting; or write a "
               "model in transformers' kimi_linear or DeepSeek-V3 layout (--to)",
               "myriad convert --in PATH --out FILE [--dtype f32|bf16|f16]\n"
               "       myriad convert --in MODEL_DIR --out DIR --to transformers|deepseek-v3 [--dtype bf16] [--force]",
               {{"in", "PATH", "input: a .safetensors file or a checkpoint directory (with --to: a model or run)"},
                {"out", "FILE", "output .safetensors file, or with --to the output directory (written atomically)"},
                {"dtype", "f32|bf16|f16", "cast floating tensors to this type (integer tensors are unchanged)"},
                {"to", "LAYOUT",
                 "transformers (kimi_linear) or deepseek-v3: config.json, model.safetensors, tokenizer/"},
                {"force", "", "with --to: replace a non-empty output directory"}},
               run_convert);
