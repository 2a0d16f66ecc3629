// Python bindings (pybind11, Debian's pybind11-dev): `import myriad` after `make python`
// (build/release/python/myriad.*.so). The library's own objects, no second implementation:
//   Tokenizer(path)                        any kind Tokenizer::load reads; encode -> numpy int32, decode -> str
//   Model(dir, tokenizer=None)             InferenceModel::load; logits(tokens) -> numpy float32 [T, vocab] (every
//                                          position, one forward over a fresh sequence state), generate(...)
//   Trainer(dir=None, config=None, ...)    the training Transformer (a model's, checkpoint's or run's weights, or
//                                          random ones from a config) with AdamW; step(tokens, targets) on numpy [B, T]
//                                          batches
// myriad's errors arrive as Python exceptions (ValueError for bad values, RuntimeError otherwise) with myriad's
// message. The GIL is released while the model computes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <optional>

#include "autograd/tape.h"
#include "build_info.h"
#include "core/error.h"
#include "data/tokenize/tokenizer.h"
#include "infer/generate.h"
#include "infer/inference_model.h"
#include "infer/speculative.h"
#include "infer/weight_layout.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "model/config.h"
#include "model/transformer.h"
#include "train/optimizer.h"

namespace py = pybind11;
using namespace myriad;

namespace {

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

std::vector<int32_t> to_ids(const IdArray& a, const char* what) {
  MYRIAD_REQUIRE(a.ndim() == 1, kShape, what, ": a 1-D array of token ids, got ", a.ndim(), " dimensions");
  std::vector<int32_t> out(size_t(a.shape(0)));
  for (py::ssize_t i = 0; i < a.shape(0); ++i) {
    const int64_t v = a.at(i);
    MYRIAD_REQUIRE(v >= 0 && v <= INT32_MAX, kValue, what, "[", i, "] = ", v, ": not a token id");
    out[size_t(i)] = int32_t(v);
  }
  return out;
}

py::array_t<int32_t> to_numpy(const std::vector<int32_t>& v) {
  py::array_t<int32_t> a(py::ssize_t(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

struct PyModel {
  std::shared_ptr<InferenceModel> model;

  py::array_t<float> logits(const IdArray& tokens) const {
    const std::vector<int32_t> ids = to_ids(tokens, "logits(tokens)");
    MYRIAD_REQUIRE(!ids.empty(), kValue, "logits(tokens): no tokens");
    Tensor out;
    {
      py::gil_scoped_release free;
      SequenceState s = model->new_sequence();
      BatchEntry e{&s, std::span<const int32_t>(ids), nullptr};
      out = model->forward(std::span<const BatchEntry>(&e, 1), /*all_logits=*/true).contiguous();
    }
    const int64_t T = out.size(0), V = out.size(1);
    py::array_t<float> a({py::ssize_t(T), py::ssize_t(V)});
    std::copy(out.data<float>(), out.data<float>() + T * V, a.mutable_data());
    return a;
  }

  // The counters of the last generate() with speculation (infer/speculative.h).
  mutable SpeculationStats last_speculation;

  // draft: None (no speculation), "ngram" (prompt lookup) or a Model with the same tokenizer (draft model).
  py::array_t<int32_t> generate(const IdArray& prompt, int max_tokens, float temperature, int64_t top_k, float top_p,
                                uint64_t seed, bool stop_at_eos, const py::object& draft = py::none(),
                                int64_t spec_tokens = 6) const;

  py::array_t<int32_t> generate_plain(const IdArray& prompt, int max_tokens, float temperature, int64_t top_k,
                                      float top_p, uint64_t seed, bool stop_at_eos) const {
    return generate(prompt, max_tokens, temperature, top_k, top_p, seed, stop_at_eos);
  }
};

py::array_t<int32_t> PyModel::generate(const IdArray& prompt, int max_tokens, float temperature, int64_t top_k,
                                       float top_p, uint64_t seed, bool stop_at_eos, const py::object& draft,
                                       int64_t spec_tokens) const {
  const std::vector<int32_t> ids = to_ids(prompt, "generate(prompt)");
  SamplingParams sp;
  sp.temperature = temperature;
  sp.top_k = top_k;
  sp.top_p = top_p;
  sp.seed = seed;
  const Tokenizer& tok = model->tokenizer();
  const int32_t stop = stop_at_eos && tok.loaded() && tok.end_of_text_id() >= 0 ? tok.end_of_text_id() : -1;
  std::unique_ptr<Drafter> drafter;
  if (py::isinstance<py::str>(draft)) {
    const auto name = draft.cast<std::string>();
    MYRIAD_REQUIRE(name == "ngram", kValue, "generate(draft): \"ngram\", a Model or None, got \"", name, "\"");
    drafter = std::make_unique<NgramDrafter>();
  } else if (py::isinstance<PyModel>(draft)) {
    drafter = std::make_unique<ModelDrafter>(draft.cast<const PyModel&>().model, *model, seed);
  } else {
    MYRIAD_REQUIRE(draft.is_none(), kValue, "generate(draft): \"ngram\", a Model or None");
  }
  MYRIAD_REQUIRE(spec_tokens >= 1 && spec_tokens <= 64, kValue, "generate(spec_tokens): ", spec_tokens,
                 " is outside [1, 64]");
  std::vector<int32_t> out;
  last_speculation = {};
  {
    py::gil_scoped_release free;
    out = myriad::generate(*model, ids, max_tokens, sp, stop, {}, 0,
                           {drafter.get(), spec_tokens, drafter ? &last_speculation : nullptr});
  }
  return to_numpy(out);
}

// The training model and its optimizer: one AdamW step per call on a batch of sequences.
struct PyTrainer {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<AdamW> adamw;
  float lr = 1e-3f;
  float clip = 1.0f;

  // tokens, targets: [B, T] (targets -100 = ignored). Returns the mean cross entropy before the update.
  double step(const IdArray& tokens, const IdArray& targets) {
    MYRIAD_REQUIRE(tokens.ndim() == 2 && targets.ndim() == 2 && tokens.shape(0) == targets.shape(0) &&
                       tokens.shape(1) == targets.shape(1),
                   kShape, "step(tokens, targets): two arrays of the same shape [B, T]");
    const int64_t B = tokens.shape(0), T = tokens.shape(1);
    MYRIAD_REQUIRE(B > 0 && T > 0, kShape, "step: an empty batch [", B, ", ", T, "]");
    std::vector<std::vector<int64_t>> rows_tok(static_cast<size_t>(B)), rows_tgt(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        rows_tok[size_t(b)].push_back(tokens.at(b, t));
        rows_tgt[size_t(b)].push_back(targets.at(b, t));
      }
    py::gil_scoped_release free;
    model->weights().zero_grad();
    double loss = 0;
    for (int64_t b = 0; b < B; ++b) {
      const Tensor tk = Tensor::from_vector(rows_tok[size_t(b)], {T});
      const Tensor tg = Tensor::from_vector(rows_tgt[size_t(b)], {T});
      ForwardResult r = model->forward(tk, tg);
      loss += double(r.loss.value().data<float>()[0]) / double(B);
      std::vector<std::pair<ag::Var, Tensor>> seeds = {{r.loss, Tensor::full({}, 1.0f / float(B))}};
      if (r.aux_loss.defined()) seeds.emplace_back(r.aux_loss, Tensor::full({}, 1.0f / float(B)));
      ag::Tape::current().backward(seeds);
    }
    MYRIAD_REQUIRE(std::isfinite(loss), kValue, "step: the loss is not finite (", loss, "); no update was made");
    const double gnorm = adamw->grad_norm(model->weights());
    const float clip_scale = clip > 0 && gnorm > clip ? float(clip / gnorm) : 1.0f;
    adamw->step(model->weights(), lr, clip_scale);
    return loss;
  }
};

}  // namespace

PYBIND11_MODULE(myriad, m) {
  m.doc() = "myriad: the C++ engine's tokenizers, inference model and training step from Python";
  m.attr("__version__") = build::kVersion;  // as `myriad version` prints it (tools/build_info.h)
  m.attr("__commit__") = build::kCommit;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kValue || e.kind() == ErrorKind::kShape || e.kind() == ErrorKind::kConfig)
        PyErr_SetString(PyExc_ValueError, e.what());
      else
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::class_<Tokenizer>(m, "Tokenizer")
      .def(py::init([](const std::string& path) { return Tokenizer::load(path); }), py::arg("path"),
           "A tokenizer directory or file: tokenizer.model (myriad), tiktoken.model, tokenizer.json")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool parse_special) {
            return to_numpy(t.encode(text, parse_special ? Specials::kParse : Specials::kAsText));
          },
          py::arg("text"), py::arg("parse_special") = true)
      .def(
          "decode", [](const Tokenizer& t, const IdArray& ids) { return t.decode(to_ids(ids, "decode(ids)")); },
          py::arg("ids"), "the text (invalid UTF-8 replaced; decode_bytes gives the bytes)")
      .def(
          "decode_bytes",
          [](const Tokenizer& t, const IdArray& ids) { return py::bytes(t.decode(to_ids(ids, "decode_bytes(ids)"))); },
          py::arg("ids"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("kind", [](const Tokenizer& t) { return std::string(tokenizer_kind_name(t.kind())); })
      .def_property_readonly("eos_id", &Tokenizer::end_of_text_id)
      .def("id_of", &Tokenizer::id_of, py::arg("special"));

  py::class_<PyModel>(m, "Model")
      .def(py::init([](const std::string& dir, std::optional<std::string> tokenizer) {
             return PyModel{InferenceModel::load(dir, {}, tokenizer.value_or(""))};
           }),
           py::arg("dir"), py::arg("tokenizer") = py::none())
      .def_property_readonly("tokenizer", [](const PyModel& p) { return p.model->tokenizer(); })
      .def_property_readonly("vocab_size", [](const PyModel& p) { return p.model->vocab_size(); })
      .def_property_readonly("context", [](const PyModel& p) { return p.model->config().max_position_embeddings; })
      .def("logits", &PyModel::logits, py::arg("tokens"), "float32 [T, vocab]: the logits after every token")
      .def("generate", &PyModel::generate, py::arg("prompt"), py::arg("max_tokens") = 32, py::arg("temperature") = 0.0f,
           py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("stop_at_eos") = true,
           py::arg("draft") = py::none(), py::arg("spec_tokens") = 6,
           "the new tokens (int32); temperature 0 is greedy. draft: \"ngram\" or a draft Model (same tokenizer) "
           "for speculative decoding (the output keeps the distribution; greedy: the same tokens)")
      .def_property_readonly(
          "last_speculation",
          [](const PyModel& p) {
            const SpeculationStats& s = p.last_speculation;
            py::dict d;
            d["verifies"] = s.verifies;
            d["drafted"] = s.drafted;
            d["accepted"] = s.accepted;
            d["emitted"] = s.emitted;
            return d;
          },
          "counters of the last generate() with a draft: verifies, drafted, accepted, emitted")
      .def(
          "generate_text",
          [](const PyModel& p, const std::string& prompt, int max_tokens, float temperature, uint64_t seed) {
            const std::vector<int32_t> ids = p.model->tokenizer().encode(prompt);
            IdArray a(py::ssize_t(ids.size()));
            std::copy(ids.begin(), ids.end(), a.mutable_data());
            const py::array_t<int32_t> out = p.generate_plain(a, max_tokens, temperature, 0, 1.0f, seed, true);
            return p.model->tokenizer().decode(std::vector<int32_t>(out.data(), out.data() + out.size()));
          },
          py::arg("prompt"), py::arg("max_tokens") = 32, py::arg("temperature") = 0.0f, py::arg("seed") = 0);

  py::class_<PyTrainer>(m, "Trainer")
      .def(py::init([](std::optional<std::string> dir, std::optional<std::string> config, float lr, float weight_decay,
                       float clip, uint64_t seed) {
             MYRIAD_REQUIRE(dir.has_value() != config.has_value(), kValue,
                            "Trainer: give dir (a model, checkpoint or run: its weights) or config (random weights), "
                            "not both");
             // A run reads as its latest checkpoint, as `--model` does in the CLI.
             const std::string from = dir ? model_or_latest_checkpoint(*dir) : *config;
             const ModelConfig mc = load_model_config(from, nullptr);
             ModelWeights w = dir ? ModelWeights::from_checkpoint(open_model_checkpoint(from, mc), mc)
                                  : ModelWeights::random(mc, seed);
             PyTrainer t;
             t.model = std::make_unique<Transformer>(mc, std::move(w));
             AdamWConfig hp;
             hp.weight_decay = weight_decay;
             t.adamw = std::make_unique<AdamW>(mc, t.model->weights(), hp);
             t.lr = lr;
             t.clip = clip;
             return t;
           }),
           py::arg("dir") = py::none(), py::arg("config") = py::none(), py::arg("lr") = 1e-3f,
           py::arg("weight_decay") = 0.1f, py::arg("clip") = 1.0f, py::arg("seed") = 0)
      .def("step", &PyTrainer::step, py::arg("tokens"), py::arg("targets"),
           "one AdamW step on int arrays [B, T] (targets -100: ignored); returns the loss before the update")
      .def_property(
          "lr", [](const PyTrainer& t) { return t.lr; }, [](PyTrainer& t, float v) { t.lr = v; })
      .def_property_readonly("steps", [](const PyTrainer& t) { return t.adamw->steps(); });
}
