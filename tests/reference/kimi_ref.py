#!/usr/bin/env python3
"""Plain-PyTorch reference of myriad's kimi_linear text model (docs/design.md §1): the parity oracle.

Written from the maths in docs/design.md §1 and docs/tensors.md; functions over a dict of tensors, no nn.Module.
Computes logits [T, vocab] and the loss of one sequence, in float64 by default, with autograd giving every
parameter's gradient. See tests/reference/README.md for the exact conventions.

CLI:
  kimi_ref.py init   --config F --out DIR [--seed S] [--std X]
        DIR/config.json (copy of F) + DIR/model.safetensors (f32, every tensor of docs/tensors.md, random init)
  kimi_ref.py run    --model DIR --tokens 1,2,3 [--targets 2,3,-100] --out FILE.safetensors [--dtype f64|f32]
                     [--kda recurrent|chunk] [--chunk N] [--mla naive|absorbed] [--activations]
        forward + backward; writes logits [T, vocab], loss [], grad.<name> for every parameter (f32), atomically.
        Without --targets the targets are the next tokens (tokens[1:] + [-100]).
  kimi_ref.py shapes --config F [--json]
        every tensor name and shape the config implies, with total / activated parameter counts.
"""

import argparse
import json
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
L2NORM_EPS = 1e-6  # KDA q/k L2Norm: x / sqrt(sum x^2 + 1e-6)
MLA_LATENT_EPS = 1e-6  # q_a_layernorm, kv_a_layernorm (every other RMSNorm uses rms_norm_eps)

# ----------------------------------------------------------------------------------------------------------
# Config: flat kimi_linear or nested text_config, with the defaults of src/model/config.h.


class LinearAttn:
    def __init__(self, d):
        self.kda_layers = list(d.get("kda_layers", []))
        self.full_attn_layers = list(d.get("full_attn_layers", []))
        self.num_heads = int(d.get("num_heads", 0))
        self.head_dim = int(d.get("head_dim", 0))
        self.short_conv_kernel_size = int(d.get("short_conv_kernel_size", 4))
        # absent or null: the unbounded gate of Kimi-Linear's modeling code and fla (-exp(A_log) softplus(.))
        lb = d.get("gate_lower_bound")
        self.gate_lower_bound = None if lb is None else float(lb)
        self.use_full_rank_gate = bool(d.get("use_full_rank_gate", True))


class Config:
    """The text config's fields (K3 names) with config.h's defaults. Only what the maths needs is checked."""

    def __init__(self, d):
        self.raw = d
        self.nested = "text_config" in d
        t = dict(d["text_config"]) if self.nested else dict(d)
        if self.nested and "tie_word_embeddings" in d and "tie_word_embeddings" not in t:
            t["tie_word_embeddings"] = d["tie_word_embeddings"]

        def alias(name, other, default):
            if name in t and other in t and t[name] != t[other]:
                raise ValueError(f"config: {other} disagrees with {name}")
            return t.get(name, t.get(other, default))

        for req in ("vocab_size", "hidden_size", "num_hidden_layers", "rms_norm_eps"):
            if req not in t:
                raise ValueError(f"config: {req} is required")
        self.vocab_size = int(t["vocab_size"])
        self.hidden_size = int(t["hidden_size"])
        self.num_hidden_layers = int(t["num_hidden_layers"])
        self.max_position_embeddings = int(t.get("max_position_embeddings", 0))
        self.rms_norm_eps = float(t["rms_norm_eps"])
        self.hidden_act = t.get("hidden_act", "situ")
        self.tie_word_embeddings = bool(t.get("tie_word_embeddings", False))
        self.initializer_range = float(t.get("initializer_range", 0.02))
        # MLA
        self.num_attention_heads = int(t.get("num_attention_heads", 0))
        self.q_lora_rank = t.get("q_lora_rank", None)
        self.kv_lora_rank = int(t.get("kv_lora_rank", 0))
        self.qk_nope_head_dim = int(t.get("qk_nope_head_dim", 0))
        self.qk_rope_head_dim = int(t.get("qk_rope_head_dim", 0))
        self.v_head_dim = int(t.get("v_head_dim", 0))
        self.mla_use_nope = bool(t.get("mla_use_nope", False))
        self.mla_use_output_gate = bool(t.get("mla_use_output_gate", False))
        self.rope_theta = float(t.get("rope_theta", 10000.0))
        self.rope_scaling = t.get("rope_scaling", None)
        # DeepSeek-V3 stores the RoPE dims interleaved (pairs 2i, 2i+1); its modeling code de-interleaves them
        # before rotate-half. Default on for model_type deepseek_v3, as transformers' DeepseekV3Config.
        self.rope_interleave = bool(t.get("rope_interleave", t.get("model_type") == "deepseek_v3"))
        # layout
        la = t.get("linear_attn_config", None)
        self.linear_attn_config = LinearAttn(la) if la is not None else None
        self.first_k_dense_replace = int(t.get("first_k_dense_replace", 0))
        self.moe_layer_freq = int(t.get("moe_layer_freq", 1))
        # MoE / FFN
        self.intermediate_size = int(t.get("intermediate_size", 0))
        self.num_experts = int(alias("num_experts", "n_routed_experts", 0))
        self.num_experts_per_token = int(alias("num_experts_per_token", "num_experts_per_tok", 0))
        self.num_shared_experts = int(alias("num_shared_experts", "n_shared_experts", 0))
        self.moe_intermediate_size = int(t.get("moe_intermediate_size", 0))
        self.routed_expert_hidden_size = t.get("routed_expert_hidden_size", None)
        self.latent_moe_use_norm = bool(t.get("latent_moe_use_norm", True))
        self.routed_scaling_factor = float(t.get("routed_scaling_factor", 1.0))
        self.moe_renormalize = bool(t.get("moe_renormalize", True))
        self.moe_router_activation_func = t.get("moe_router_activation_func", "sigmoid")
        self.topk_method = t.get("topk_method", "noaux_tc")
        self.use_grouped_topk = bool(t.get("use_grouped_topk", False))
        self.num_expert_group = int(t.get("num_expert_group", 1))
        self.activation_situ_beta = float(t.get("activation_situ_beta", 4.0))
        b2 = t.get("activation_situ_linear_beta", 25.0)
        self.activation_situ_linear_beta = float("inf") if b2 is None else float(b2)  # null: no clamp
        self.router_init_std = float(t.get("router_init_std", 0.006))
        # AttnRes
        self.attn_res_mode = t.get("attn_res_mode", "block")
        self.attn_res_block_size = int(t.get("attn_res_block_size", 1))

        if self.hidden_act not in ("situ", "silu"):
            raise ValueError(f"config: hidden_act {self.hidden_act!r}")
        if self.moe_router_activation_func not in ("sigmoid", "softmax"):
            raise ValueError(f"config: moe_router_activation_func {self.moe_router_activation_func!r}")
        if self.topk_method not in ("noaux_tc", "greedy"):
            raise ValueError(f"config: topk_method {self.topk_method!r}")
        if self.use_grouped_topk and self.num_expert_group > 1:
            raise NotImplementedError("group-limited routing")
        if self.attn_res_mode not in ("block", "none"):
            raise NotImplementedError(f"attn_res_mode {self.attn_res_mode!r} (the reference has block and none)")
        if self.rope_scaling is not None:
            rs = self.rope_scaling
            typ = rs.get("type", rs.get("rope_type"))
            if typ != "yarn":
                raise ValueError(f"config: rope_scaling type {typ!r}; only yarn")
        if self.linear_attn_config is not None:
            la = self.linear_attn_config
            listed = sorted(la.kda_layers + la.full_attn_layers)
            if listed != list(range(1, self.num_hidden_layers + 1)):
                raise ValueError("config: every layer 1..n must be in exactly one of kda_layers/full_attn_layers")

    # 0-based layer helpers (config.h)
    def is_kda(self, l):
        la = self.linear_attn_config
        return la is not None and (l + 1) in la.kda_layers

    def is_moe(self, l):
        return l >= self.first_k_dense_replace and l % self.moe_layer_freq == 0

    @property
    def latent(self):
        return self.routed_expert_hidden_size is not None

    @property
    def expert_width(self):
        return int(self.routed_expert_hidden_size) if self.latent else self.hidden_size


def load_config(path):
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as f:
        return Config(json.load(f))


# ----------------------------------------------------------------------------------------------------------
# Tensor list (docs/tensors.md)


def tensor_specs(cfg):
    """[(name, shape, kind)] for every checkpoint tensor, in a fixed order. kind drives the init."""
    D, V = cfg.hidden_size, cfg.vocab_size
    out = [("model.embed_tokens.weight", [V, D], "embed")]
    if not cfg.tie_word_embeddings:
        out.append(("lm_head.weight", [V, D], "linear"))
    out.append(("model.norm.weight", [D], "norm"))
    block = cfg.attn_res_mode == "block"
    if block:
        out += [("model.output_attn_res_norm.weight", [D], "norm"), ("model.output_attn_res_proj.weight", [1, D], "res_proj")]
    for l in range(cfg.num_hidden_layers):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", [D], "norm"), (p + "post_attention_layernorm.weight", [D], "norm")]
        if block:
            out += [(p + "self_attention_res_norm.weight", [D], "norm"), (p + "self_attention_res_proj.weight", [1, D], "res_proj"),
                    (p + "mlp_res_norm.weight", [D], "norm"), (p + "mlp_res_proj.weight", [1, D], "res_proj")]
        a = p + "self_attn."
        if cfg.is_kda(l):
            la = cfg.linear_attn_config
            H, K, W = la.num_heads, la.head_dim, la.short_conv_kernel_size
            out += [(a + "q_proj.weight", [H * K, D], "linear"), (a + "k_proj.weight", [H * K, D], "linear"),
                    (a + "v_proj.weight", [H * K, D], "linear"),
                    (a + "q_conv1d.weight", [H * K, 1, W], "conv"), (a + "k_conv1d.weight", [H * K, 1, W], "conv"),
                    (a + "v_conv1d.weight", [H * K, 1, W], "conv"),
                    (a + "A_log", [H], "A_log"), (a + "f_a_proj.weight", [K, D], "linear"),
                    (a + "f_b_proj.weight", [H * K, K], "linear"), (a + "dt_bias", [H * K], "dt_bias"),
                    (a + "b_proj.weight", [H, D], "linear")]
            if cfg.linear_attn_config.use_full_rank_gate:
                out.append((a + "g_proj.weight", [H * K, D], "linear"))
            else:  # the low-rank output gate: g_b(g_a(x))
                out += [(a + "g_a_proj.weight", [K, D], "linear"), (a + "g_b_proj.weight", [H * K, K], "linear")]
            out += [(a + "o_norm.weight", [K], "norm"), (a + "o_proj.weight", [D, H * K], "linear")]
        else:
            H, Dn, Dr, Dv, Ckv = (cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
                                  cfg.kv_lora_rank)
            if cfg.q_lora_rank is None:
                out.append((a + "q_proj.weight", [H * (Dn + Dr), D], "linear"))
            else:
                Cq = int(cfg.q_lora_rank)
                out += [(a + "q_a_proj.weight", [Cq, D], "linear"), (a + "q_a_layernorm.weight", [Cq], "norm"),
                        (a + "q_b_proj.weight", [H * (Dn + Dr), Cq], "linear")]
            out += [(a + "kv_a_proj_with_mqa.weight", [Ckv + Dr, D], "linear"), (a + "kv_a_layernorm.weight", [Ckv], "norm"),
                    (a + "kv_b_proj.weight", [H * (Dn + Dv), Ckv], "linear")]
            if cfg.mla_use_output_gate:
                out.append((a + "g_proj.weight", [H * Dv, D], "linear"))
            out.append((a + "o_proj.weight", [D, H * Dv], "linear"))
        if cfg.is_moe(l):
            m = p + "block_sparse_moe."
            E, Fi, L, S = cfg.num_experts, cfg.moe_intermediate_size, cfg.expert_width, cfg.num_shared_experts
            out += [(m + "gate.weight", [E, D], "router"), (m + "gate.e_score_correction_bias", [E], "bias")]
            for j in range(E):
                out += [(m + f"experts.{j}.w1.weight", [Fi, L], "linear"), (m + f"experts.{j}.w2.weight", [L, Fi], "linear"),
                        (m + f"experts.{j}.w3.weight", [Fi, L], "linear")]
            if cfg.latent:
                out.append((m + "routed_expert_down_proj.weight", [L, D], "linear"))
                if cfg.latent_moe_use_norm:
                    out.append((m + "routed_expert_norm.weight", [L], "norm"))
                out.append((m + "routed_expert_up_proj.weight", [D, L], "linear"))
            if S > 0:
                out += [(m + "shared_experts.gate_proj.weight", [S * Fi, D], "linear"),
                        (m + "shared_experts.up_proj.weight", [S * Fi, D], "linear"),
                        (m + "shared_experts.down_proj.weight", [D, S * Fi], "linear")]
        else:
            f = p + "mlp."
            I = cfg.intermediate_size
            out += [(f + "gate_proj.weight", [I, D], "linear"), (f + "up_proj.weight", [I, D], "linear"),
                    (f + "down_proj.weight", [D, I], "linear")]
    return out


def is_param(name):
    """Everything is a trained parameter except the router bias (selection only; set by balancing, not SGD)."""
    return not name.endswith("e_score_correction_bias")


def init_weights(cfg, seed=0, std=None):
    """Random f32 weights for every tensor of tensor_specs (docs/tensors.md); see README for the scheme."""
    g = torch.Generator().manual_seed(int(seed))
    std = cfg.initializer_range if std is None else float(std)
    W = {}
    for name, shape, kind in tensor_specs(cfg):
        if kind in ("linear", "embed", "res_proj"):
            t = torch.randn(shape, generator=g) * std
        elif kind == "norm":
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif kind == "conv":
            bound = 1.0 / math.sqrt(shape[-1])  # PyTorch's Conv1d default (fan_in = 1 * width)
            t = (torch.rand(shape, generator=g) * 2 - 1) * bound
        elif kind == "A_log":
            t = torch.log(1.0 + 15.0 * torch.rand(shape, generator=g))  # log(U(1, 16))
        elif kind == "dt_bias":
            t = 0.1 * torch.randn(shape, generator=g)
        elif kind == "router":
            t = torch.randn(shape, generator=g) * cfg.router_init_std
        elif kind == "bias":
            t = 1e-3 * torch.randn(shape, generator=g)
        else:
            raise AssertionError(kind)
        W[name] = t.float().contiguous()
    return W


def count_params(cfg):
    """(total, activated): activated excludes the input embedding table and the unchosen routed experts."""
    total = act = 0
    for name, shape, kind in tensor_specs(cfg):
        n = math.prod(shape)
        total += n
        if name == "model.embed_tokens.weight":
            continue
        if ".experts." in name:
            n = n * cfg.num_experts_per_token / cfg.num_experts
        act += n
    return total, int(round(act))


# ----------------------------------------------------------------------------------------------------------
# Building blocks


def rms_norm(x, w, eps):
    """w * x / sqrt(mean(x^2) + eps) over the last dim (w None: no weight)."""
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def l2_norm(x, eps=L2NORM_EPS):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def linear(x, w):
    return x @ w.t()


def situ_glu(g, u, b1, b2):
    """SiTU-GLU(g, u) = [b1 tanh(g/b1) sigmoid(g)] * [b2 tanh(u/b2)]."""
    h = u if math.isinf(b2) else b2 * torch.tanh(u / b2)
    return (b1 * torch.tanh(g / b1) * torch.sigmoid(g)) * h


def glu(cfg, g, u):
    if cfg.hidden_act == "silu":
        return F.silu(g) * u
    return situ_glu(g, u, cfg.activation_situ_beta, cfg.activation_situ_linear_beta)


def short_conv(x, w):
    """Causal depthwise conv, zero initial state. x [T, C], w [C, 1, W]; y_t = sum_j w[c,0,j] x_{t-(W-1)+j}."""
    T, C = x.shape
    Wd = w.shape[-1]
    y = torch.zeros_like(x)
    for j in range(Wd):
        shift = Wd - 1 - j
        if shift >= T:
            continue
        xs = x if shift == 0 else torch.cat([x.new_zeros(shift, C), x[: T - shift]], 0)
        y = y + xs * w[:, 0, j]
    return y


# ----------------------------------------------------------------------------------------------------------
# KDA (§1.2)


def kda_recurrent(q, k, v, g, beta, S0=None):
    """The definition. q, k, g [T, H, K]; v [T, H, V]; beta [T, H]; S0 [H, K, V] or None (zeros).
    Per token: S = diag(exp g) S; S = S + beta k (v - S^T k)^T; o = S^T q. Returns (o [T, H, V], S)."""
    T, H, K = q.shape
    S = q.new_zeros(H, K, v.shape[-1]) if S0 is None else S0
    outs = []
    for t in range(T):
        S = S * torch.exp(g[t]).unsqueeze(-1)
        kt = k[t]
        pred = torch.einsum("hkv,hk->hv", S, kt)
        S = S + (beta[t][:, None, None] * kt[:, :, None]) * (v[t] - pred)[:, None, :]
        outs.append(torch.einsum("hkv,hk->hv", S, q[t]))
    return torch.stack(outs, 0), S


def kda_chunkwise(q, k, v, g, beta, chunk=64, S0=None):
    """Chunkwise-parallel form of kda_recurrent (same arguments). Inside a chunk (tokens r = 1..n, state S0 at
    its start, G_r = sum_{j<=r} g_j per channel) the updates delta_r = beta_r (v_r - (D_r S_{r-1})^T k_r) solve
        (I + A) delta = beta (v - (exp(G) * k) S0),   A_ri = beta_r sum_c k_rc k_ic exp(G_rc - G_ic)   (i < r),
    then o_r = S0^T (exp(G_r) * q_r) + sum_{i<=r} [sum_c q_rc k_ic exp(G_rc - G_ic)] delta_i and
    S_n = diag(exp G_n) S0 + sum_i (k_i * exp(G_n - G_i)) delta_i^T. Decays are formed pairwise
    (exp of differences, never 1/exp(G)), so nothing overflows."""
    T, H, K = q.shape
    Vd = v.shape[-1]
    S = q.new_zeros(H, K, Vd) if S0 is None else S0
    outs = []
    for s in range(0, T, chunk):
        e = min(s + chunk, T)
        n = e - s
        qc, kc, vc, gc, bc = q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e]
        G = gc.cumsum(0)  # [n, H, K]
        incl = torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device))
        strict = torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device), -1)
        diff = G[:, None] - G[None, :]  # [r, i, H, K] = G_r - G_i
        dec = torch.exp(diff.masked_fill(~incl[:, :, None, None], 0.0)) * incl[:, :, None, None].to(q.dtype)
        A = torch.einsum("rhc,ihc,rihc->hri", kc, kc, dec) * strict.to(q.dtype) * bc.t()[:, :, None]
        Mqk = torch.einsum("rhc,ihc,rihc->hri", qc, kc, dec)
        gam = torch.exp(G)
        rhs = bc[:, :, None] * (vc - torch.einsum("hkv,rhk->rhv", S, kc * gam))  # [n, H, V]
        eye = torch.eye(n, dtype=q.dtype, device=q.device)
        delta = torch.linalg.solve_triangular(A + eye, rhs.transpose(0, 1), upper=False, unitriangular=True)  # [H,n,V]
        o = torch.einsum("hkv,rhk->rhv", S, qc * gam) + torch.einsum("hri,hiv->rhv", Mqk, delta)
        outs.append(o)
        tail = torch.exp(G[-1][None] - G)  # [n, H, K]
        S = S * gam[-1][:, :, None] + torch.einsum("ihk,hiv->hkv", kc * tail, delta)
    return torch.cat(outs, 0), S


def kda_inputs(cfg, W, p, x):
    """Everything the recurrence consumes: q, k, v [T, H, K], g [T, H, K] (log-decay), beta [T, H]."""
    la = cfg.linear_attn_config
    H, K = la.num_heads, la.head_dim
    T = x.shape[0]

    def branch(name):
        y = short_conv(linear(x, W[p + f"{name}_proj.weight"]), W[p + f"{name}_conv1d.weight"])
        return F.silu(y).view(T, H, K)

    q = l2_norm(branch("q")) * K ** -0.5
    k = l2_norm(branch("k"))
    v = branch("v")
    f = linear(linear(x, W[p + "f_a_proj.weight"]), W[p + "f_b_proj.weight"]) + W[p + "dt_bias"]
    if la.gate_lower_bound is None:
        g = -torch.exp(W[p + "A_log"])[None, :, None] * F.softplus(f.view(T, H, K))
    else:
        g = la.gate_lower_bound * torch.sigmoid(torch.exp(W[p + "A_log"])[None, :, None] * f.view(T, H, K))
    beta = torch.sigmoid(linear(x, W[p + "b_proj.weight"]))
    return q, k, v, g, beta


def kda(cfg, W, p, x, impl="recurrent", chunk=64, rec=None):
    la = cfg.linear_attn_config
    H, K = la.num_heads, la.head_dim
    T = x.shape[0]
    q, k, v, g, beta = kda_inputs(cfg, W, p, x)
    if impl == "recurrent":
        o, S = kda_recurrent(q, k, v, g, beta)
    elif impl == "chunk":
        o, S = kda_chunkwise(q, k, v, g, beta, chunk=chunk)
    else:
        raise ValueError(impl)
    o = rms_norm(o, W[p + "o_norm.weight"], cfg.rms_norm_eps)
    if cfg.linear_attn_config.use_full_rank_gate:
        gate = linear(x, W[p + "g_proj.weight"])
    else:
        gate = linear(linear(x, W[p + "g_a_proj.weight"]), W[p + "g_b_proj.weight"])
    o = o * torch.sigmoid(gate).view(T, H, K)
    y = linear(o.reshape(T, H * K), W[p + "o_proj.weight"])
    if rec is not None:
        rec.update({"q": q, "k": k, "v": v, "g": g, "beta": beta, "core": o, "state": S})
    return y


# ----------------------------------------------------------------------------------------------------------
# MLA (§1.3)


def yarn_mscale(s, m):
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def rope_tables(cfg, T, dtype, device=None):
    """cos, sin [T, Dr] (rotate-half layout: column j and j + Dr/2 share frequency j) and the softmax-scale
    multiplier. YaRN as in DeepSeek-V2/V3's reference (correction range floor/ceil, clamped, linear ramp)."""
    Dr = cfg.qk_rope_head_dim
    base = cfg.rope_theta
    half = torch.arange(0, Dr, 2, dtype=torch.float64) / Dr  # 2j / Dr
    inv_freq = base ** (-half)
    attn_factor = 1.0
    rs = cfg.rope_scaling
    if rs is not None:
        f = float(rs["factor"])
        orig = int(rs.get("original_max_position_embeddings") or cfg.max_position_embeddings)
        beta_fast = float(rs.get("beta_fast", 32.0) if rs.get("beta_fast") is not None else 32.0)
        beta_slow = float(rs.get("beta_slow", 1.0) if rs.get("beta_slow") is not None else 1.0)
        ms = float(rs.get("mscale") if rs.get("mscale") is not None else 1.0)
        ms_all = float(rs.get("mscale_all_dim") if rs.get("mscale_all_dim") is not None else 0.0)

        def corr_dim(n_rot):  # the dim index whose wavelength makes n_rot rotations over orig positions
            return Dr * math.log(orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(corr_dim(beta_fast)), 0)
        high = min(math.ceil(corr_dim(beta_slow)), Dr - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(Dr // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extra = 1.0 - ramp  # 1: keep the original (extrapolate, high freq); 0: interpolate (divide by f)
        inv_freq = (inv_freq / f) * (1 - extra) + inv_freq * extra
        cs = yarn_mscale(f, ms) / yarn_mscale(f, ms_all)
        attn_factor = yarn_mscale(f, ms_all) ** 2
    else:
        cs = 1.0
    t = torch.arange(T, dtype=torch.float64)
    ang = t[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], -1)
    return (torch.cos(ang) * cs).to(dtype), (torch.sin(ang) * cs).to(dtype), attn_factor


def apply_rope(x, cos, sin):
    """x [T, ..., Dr]; rotate-half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) with x1 = x[:Dr/2]."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    shape = [x.shape[0]] + [1] * (x.dim() - 2) + [x.shape[-1]]
    return x * cos.view(shape) + rot * sin.view(shape)


def mla_projections(cfg, W, p, x):
    """q_nope [T,H,Dn], q_pe [T,H,Dr] (rotated if RoPE), c_kv_normed [T,Ckv], k_pe [T,Dr] (rotated), scale."""
    H, Dn, Dr, Ckv = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.kv_lora_rank
    T = x.shape[0]
    if cfg.q_lora_rank is None:
        q = linear(x, W[p + "q_proj.weight"])
    else:
        cq = rms_norm(linear(x, W[p + "q_a_proj.weight"]), W[p + "q_a_layernorm.weight"], MLA_LATENT_EPS)
        q = linear(cq, W[p + "q_b_proj.weight"])
    q = q.view(T, H, Dn + Dr)
    q_nope, q_pe = q[..., :Dn], q[..., Dn:]
    kv = linear(x, W[p + "kv_a_proj_with_mqa.weight"])
    c_kv, k_pe = kv[:, :Ckv], kv[:, Ckv:]
    c = rms_norm(c_kv, W[p + "kv_a_layernorm.weight"], MLA_LATENT_EPS)
    scale = (Dn + Dr) ** -0.5
    if not cfg.mla_use_nope and Dr > 0:
        cos, sin, factor = rope_tables(cfg, T, x.dtype, x.device)
        if cfg.rope_interleave:  # as DeepSeek's code: (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...)
            q_pe = q_pe.reshape(*q_pe.shape[:-1], Dr // 2, 2).transpose(-1, -2).reshape(q_pe.shape)
            k_pe = k_pe.reshape(*k_pe.shape[:-1], Dr // 2, 2).transpose(-1, -2).reshape(k_pe.shape)
        q_pe = apply_rope(q_pe, cos, sin)
        k_pe = apply_rope(k_pe, cos, sin)
        scale = scale * factor
    return q_nope, q_pe, c, k_pe, scale


def causal_softmax(scores):
    """scores [H, T, T] (query, key) -> probabilities with keys after the query masked."""
    T = scores.shape[-1]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=scores.device), 1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1)


def mla(cfg, W, p, x, impl="naive", rec=None):
    """Gated MLA. impl "naive": per-head k_nope / v from kv_b_proj; "absorbed": only c_kv (normed) and k_pe
    are kept per token; kv_b_proj's key half is folded into the query, its value half applied after attention."""
    H, Dn, Dv, Ckv = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    T = x.shape[0]
    q_nope, q_pe, c, k_pe, scale = mla_projections(cfg, W, p, x)
    wkv = W[p + "kv_b_proj.weight"].view(H, Dn + Dv, Ckv)
    pe = torch.einsum("thr,sr->hts", q_pe, k_pe)
    if impl == "naive":
        kvb = torch.einsum("hjc,tc->thj", wkv, c)  # [T, H, Dn+Dv]
        k_nope, v = kvb[..., :Dn], kvb[..., Dn:]
        scores = (torch.einsum("thd,shd->hts", q_nope, k_nope) + pe) * scale
        P = causal_softmax(scores)
        out = torch.einsum("hts,shv->thv", P, v)
    elif impl == "absorbed":
        w_uk, w_uv = wkv[:, :Dn, :], wkv[:, Dn:, :]
        q_lat = torch.einsum("thd,hdc->thc", q_nope, w_uk)  # query in latent space [T, H, Ckv]
        scores = (torch.einsum("thc,sc->hts", q_lat, c) + pe) * scale
        P = causal_softmax(scores)
        o_lat = torch.einsum("hts,sc->thc", P, c)
        out = torch.einsum("thc,hvc->thv", o_lat, w_uv)
    else:
        raise ValueError(impl)
    out = out.reshape(T, H * Dv)
    if cfg.mla_use_output_gate:
        out = out * torch.sigmoid(linear(x, W[p + "g_proj.weight"]))
    if rec is not None:
        rec.update({"probs": P, "c_kv": c, "k_pe": k_pe, "attn": out})
    return linear(out, W[p + "o_proj.weight"])


# ----------------------------------------------------------------------------------------------------------
# FFN and MoE (§1.5)


def dense_ffn(cfg, W, p, x):
    return linear(glu(cfg, linear(x, W[p + "gate_proj.weight"]), linear(x, W[p + "up_proj.weight"])),
                  W[p + "down_proj.weight"])


def topk_lowest_index(key, k):
    """Indices of the k largest entries per row; ties go to the lower index (stable sort of -key)."""
    return torch.sort(-key, dim=-1, stable=True).indices[:, :k]


def route(cfg, W, p, x):
    """Router: scores s [T,E], chosen experts idx [T,k], mixture weights [T,k] (differentiable through s)."""
    logits = linear(x, W[p + "gate.weight"])
    s = torch.sigmoid(logits) if cfg.moe_router_activation_func == "sigmoid" else torch.softmax(logits, -1)
    key = s.detach()
    if cfg.topk_method == "noaux_tc":
        key = key + W[p + "gate.e_score_correction_bias"].detach().to(key.dtype)
    idx = topk_lowest_index(key, cfg.num_experts_per_token)
    chosen = s.gather(1, idx)
    # upstream renormalises only with more than one expert per token
    renorm = cfg.moe_renormalize and cfg.num_experts_per_token > 1
    w = chosen / chosen.sum(-1, keepdim=True) if renorm else chosen
    return s, key, idx, w * cfg.routed_scaling_factor


def moe(cfg, W, p, x, rec=None):
    T = x.shape[0]
    s, key, idx, weights = route(cfg, W, p, x)
    z = linear(x, W[p + "routed_expert_down_proj.weight"]) if cfg.latent else x
    u = z.new_zeros(T, z.shape[1])
    for e in range(cfg.num_experts):
        tok, slot = (idx == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        q = p + f"experts.{e}."
        ze = z[tok]
        he = linear(glu(cfg, linear(ze, W[q + "w1.weight"]), linear(ze, W[q + "w3.weight"])), W[q + "w2.weight"])
        u = u.index_add(0, tok, he * weights[tok, slot][:, None])
    if cfg.latent:
        y = rms_norm(u, W[p + "routed_expert_norm.weight"], cfg.rms_norm_eps) if cfg.latent_moe_use_norm else u
        y = linear(y, W[p + "routed_expert_up_proj.weight"])
    else:
        y = u
    if cfg.num_shared_experts > 0:
        y = y + dense_ffn(cfg, W, p + "shared_experts.", x)
    if rec is not None:
        rec.update({"router_scores": s, "router_key": key, "experts": idx, "weights": weights, "latent": u})
    return y


# ----------------------------------------------------------------------------------------------------------
# AttnRes (§1.4) and the model


def attn_res_read(w_norm, w_proj, cands, eps):
    """score_c = sum_d (w_norm * w_proj[0])_d V_c,d / rms(V_c); p = softmax over candidates; sum_c p_c V_c."""
    V = torch.stack(cands, 0)  # [C, T, D]
    w = w_norm * w_proj[0]
    rms = torch.sqrt(V.pow(2).mean(-1) + eps)  # [C, T]
    score = (V @ w) / rms
    prob = torch.softmax(score, 0)
    return (prob[..., None] * V).sum(0)


def forward(cfg, W, tokens, kda_impl="recurrent", kda_chunk=64, mla_impl="naive", rec=None, embeddings=None):
    """logits [T, vocab] of one sequence. rec: optional dict filled with intermediate activations. embeddings:
    [T, D] to use instead of the token lookup (images placed at their placeholders, tests/model/vision_parity.py)."""
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    eps = cfg.rms_norm_eps
    x = W["model.embed_tokens.weight"][tokens] if embeddings is None else embeddings
    if rec is not None:
        rec["embeddings"] = x

    def mixer(l, h, r):
        p = f"model.layers.{l}.self_attn."
        if cfg.is_kda(l):
            return kda(cfg, W, p, h, impl=kda_impl, chunk=kda_chunk, rec=r)
        return mla(cfg, W, p, h, impl=mla_impl, rec=r)

    def ffn(l, h, r):
        if cfg.is_moe(l):
            return moe(cfg, W, f"model.layers.{l}.block_sparse_moe.", h, rec=r)
        return dense_ffn(cfg, W, f"model.layers.{l}.mlp.", h)

    def norm(l, which, h):
        return rms_norm(h, W[f"model.layers.{l}.{which}.weight"], eps)

    if cfg.attn_res_mode == "none":
        h = x
        for l in range(cfg.num_hidden_layers):
            r = {} if rec is not None else None
            m = mixer(l, norm(l, "input_layernorm", h), r)
            h = h + m
            f = ffn(l, norm(l, "post_attention_layernorm", h), r)
            h = h + f
            if rec is not None:
                rec.update({f"layers.{l}.{k}": v for k, v in r.items()})
                rec[f"layers.{l}.mixer_out"], rec[f"layers.{l}.ffn_out"], rec[f"layers.{l}.hidden"] = m, f, h
    else:
        B = cfg.attn_res_block_size
        snaps, run = [], x

        def read(which, l=None):
            pre = "model.output_attn_res" if l is None else f"model.layers.{l}.{which}"
            return attn_res_read(W[pre + "_norm.weight"], W[pre + "_proj.weight"], snaps + [run], eps)

        for l in range(cfg.num_hidden_layers):
            r = {} if rec is not None else None
            h = run if not snaps else read("self_attention_res", l)
            if l % B == 0:
                snaps.append(run)
                run = torch.zeros_like(run)
            m = mixer(l, norm(l, "input_layernorm", h), r)
            run = run + m
            h2 = read("mlp_res", l)
            f = ffn(l, norm(l, "post_attention_layernorm", h2), r)
            run = run + f
            if rec is not None:
                rec.update({f"layers.{l}.{k}": v for k, v in r.items()})
                rec[f"layers.{l}.mixer_in"], rec[f"layers.{l}.ffn_in"] = h, h2
                rec[f"layers.{l}.mixer_out"], rec[f"layers.{l}.ffn_out"] = m, f
        h = read("output_attn_res")
    h = rms_norm(h, W["model.norm.weight"], eps)
    if rec is not None:
        rec["final_hidden"] = h
    head = W["model.embed_tokens.weight"] if cfg.tie_word_embeddings else W["lm_head.weight"]
    return linear(h, head)


def cross_entropy(logits, targets):
    """Mean over targets != -100 (0 when there is none)."""
    targets = torch.as_tensor(targets, dtype=torch.long)
    mask = targets != IGNORE_INDEX
    if not bool(mask.any()):
        return logits.sum() * 0.0
    logp = torch.log_softmax(logits[mask], -1)
    return -logp.gather(1, targets[mask][:, None]).mean()


def default_targets(tokens):
    return list(tokens[1:]) + [IGNORE_INDEX]


def prepare(W, dtype=torch.float64, requires_grad=True):
    """Copies the weights to dtype; parameters (all but the router bias) become leaves requiring grad."""
    out = {}
    for name, t in W.items():
        u = t.detach().to(dtype).clone()
        if requires_grad and is_param(name):
            u.requires_grad_(True)
        out[name] = u
    return out


def loss_and_grads(cfg, W, tokens, targets=None, dtype=torch.float64, **kw):
    """(logits, loss, {name: grad}) with the weights cast to dtype; every parameter gets a gradient (zeros
    when the sequence does not reach it, e.g. an expert nobody chose)."""
    P = prepare(W, dtype)
    targets = default_targets(list(tokens)) if targets is None else targets
    logits = forward(cfg, P, tokens, **kw)
    loss = cross_entropy(logits, targets)
    params = [n for n in P if is_param(n)]
    grads = torch.autograd.grad(loss, [P[n] for n in params], allow_unused=True)
    G = {n: (torch.zeros_like(P[n]) if g is None else g) for n, g in zip(params, grads)}
    return logits.detach(), loss.detach(), G


# ----------------------------------------------------------------------------------------------------------
# Files


def load_weights(model_dir):
    from safetensors.torch import load_file

    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load_file(single)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    with open(index) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    W = {}
    for s in shards:
        W.update(load_file(os.path.join(model_dir, s)))
    return W


def check_weights(cfg, W):
    want = {n: s for n, s, _ in tensor_specs(cfg)}
    missing = [n for n in want if n not in W]
    extra = [n for n in W if n not in want]
    bad = [f"{n} {list(W[n].shape)} != {want[n]}" for n in want if n in W and list(W[n].shape) != want[n]]
    if missing or extra or bad:
        raise ValueError(f"weights do not match the config: missing {missing[:5]}, unexpected {extra[:5]}, "
                         f"shapes {bad[:5]}")


def save_atomic(tensors, path, metadata=None):
    from safetensors.torch import save_file

    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=d)
    os.close(fd)
    try:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(text, path):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def parse_ints(s):
    return [int(v) for v in s.replace(" ", "").split(",") if v != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("init", help="write a randomly initialised checkpoint")
    a.add_argument("--config", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--std", type=float, default=None, help="std of linear weights (default initializer_range)")
    b = sub.add_parser("run", help="forward + backward on one sequence")
    b.add_argument("--model", required=True)
    b.add_argument("--tokens", required=True)
    b.add_argument("--targets", default=None)
    b.add_argument("--out", required=True)
    b.add_argument("--dtype", choices=["f64", "f32"], default="f64")
    b.add_argument("--kda", choices=["recurrent", "chunk"], default="recurrent")
    b.add_argument("--chunk", type=int, default=64)
    b.add_argument("--mla", choices=["naive", "absorbed"], default="naive")
    b.add_argument("--activations", action="store_true", help="also write act.<name> intermediate tensors")
    c = sub.add_parser("shapes", help="list tensor names/shapes and parameter counts")
    c.add_argument("--config", required=True)
    c.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    if args.cmd == "init":
        with open(args.config) as f:
            text = f.read()
        cfg = Config(json.loads(text))
        total, _ = count_params(cfg)
        if total > 2e9:
            raise SystemExit(f"kimi_ref.py init: {total:.3g} parameters is too many for the reference")
        W = init_weights(cfg, args.seed, args.std)
        os.makedirs(args.out, exist_ok=True)
        write_text_atomic(text, os.path.join(args.out, "config.json"))
        save_atomic(W, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
        print(f"wrote {args.out}: {len(W)} tensors, {total} parameters")
    elif args.cmd == "run":
        cfg = load_config(args.model)
        W = load_weights(args.model)
        check_weights(cfg, W)
        tokens = parse_ints(args.tokens)
        if any(t < 0 or t >= cfg.vocab_size for t in tokens):
            raise SystemExit("kimi_ref.py run: token out of range")
        targets = default_targets(tokens) if args.targets is None else parse_ints(args.targets)
        if len(targets) != len(tokens):
            raise SystemExit("kimi_ref.py run: --targets must have as many entries as --tokens")
        dtype = torch.float64 if args.dtype == "f64" else torch.float32
        P = prepare(W, dtype)
        rec = {} if args.activations else None
        logits = forward(cfg, P, tokens, kda_impl=args.kda, kda_chunk=args.chunk, mla_impl=args.mla, rec=rec)
        loss = cross_entropy(logits, targets)
        names = [n for n in P if is_param(n)]
        grads = torch.autograd.grad(loss, [P[n] for n in names], allow_unused=True)
        out = {"logits": logits.detach().float(), "loss": loss.detach().float().reshape([])}
        for n, g in zip(names, grads):
            out["grad." + n] = (torch.zeros_like(P[n]) if g is None else g).float()
        if rec is not None:
            for k, v in rec.items():
                out["act." + k] = v.detach().float() if v.is_floating_point() else v.detach()
        meta = {"format": "pt", "tokens": ",".join(map(str, tokens)), "targets": ",".join(map(str, targets)),
                "dtype": args.dtype, "kda": args.kda, "mla": args.mla}
        save_atomic(out, args.out, metadata=meta)
        print(f"loss {loss.item():.10g}; wrote {args.out} ({len(out)} tensors)")
    elif args.cmd == "shapes":
        cfg = load_config(args.config)
        specs = tensor_specs(cfg)
        total, act = count_params(cfg)
        if args.json:
            print(json.dumps({"tensors": [[n, s] for n, s, _ in specs], "total": total, "activated": act}))
        else:
            for n, s, _ in specs:
                print(f"{n} {s}")
            print(f"total {total} activated {act}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
