#!/usr/bin/env python3
"""Self-checks of the PyTorch reference (kimi_ref.py). Plain asserts; exits non-zero on the first failure.

usage: test_reference.py   (from anywhere; uses configs/tiny.json of this repository)

Configs: tiny; tiny with RoPE + YaRN (mla_use_nope false); tiny with attn_res_mode none; tiny "plain"
(q_lora_rank null, no latent MoE, SwiGLU, softmax router, routed_scaling_factor 2.5). Checks: ShortConv
convention; chunkwise KDA = recurrent KDA (core and whole model, values and gradients); absorbed MLA = naive
MLA; RoPE/YaRN tables; decay bounds; SiTU bound and SwiGLU limit; AttnRes identity / mean; top-k ties;
causality; autograd = central finite differences (float64) on a sample of every kind of parameter;
f32 close to f64; the CLI (init + run) round trip; the flagship's parameter counts (docs/tensors.md).
"""

import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import kimi_ref as R  # noqa: E402

torch.set_num_threads(1)
F64 = torch.float64
CHECKS = [0]


def ok(cond, msg):
    CHECKS[0] += 1
    if not cond:
        print(f"FAIL: {msg}", flush=True)
        sys.exit(1)


def close(a, b, tol, msg):
    """max |a - b| <= tol * max(1, max |b|)."""
    a, b = a.detach(), b.detach()
    err = (a - b).abs().max().item() if a.numel() else 0.0
    scale = max(1.0, b.abs().max().item() if b.numel() else 0.0)
    ok(err <= tol * scale, f"{msg}: max err {err:.3e} > {tol:.1e} * {scale:.3g}")
    return err


def load_json(path):
    with open(path) as f:
        return json.load(f)


def variants():
    tiny = load_json(os.path.join(ROOT, "configs", "tiny.json"))
    rope = copy.deepcopy(tiny)
    rope["mla_use_nope"] = False
    rope["rope_theta"] = 10000.0
    rope["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512,
                            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8}
    none = copy.deepcopy(tiny)
    none["attn_res_mode"] = "none"
    none.pop("attn_res_block_size", None)
    plain = copy.deepcopy(tiny)
    plain.update({"q_lora_rank": None, "hidden_act": "silu", "moe_router_activation_func": "softmax",
                  "routed_scaling_factor": 2.5, "mla_use_output_gate": False, "attn_res_block_size": 3})
    plain.pop("routed_expert_hidden_size")
    plain["linear_attn_config"]["kda_layers"] = [2, 3]
    plain["linear_attn_config"]["full_attn_layers"] = [1, 4]
    softplus = copy.deepcopy(tiny)  # Kimi-Linear's unbounded KDA gate (no gate_lower_bound)
    softplus["linear_attn_config"].pop("gate_lower_bound")
    return [("tiny", tiny), ("tiny+yarn", rope), ("tiny+none", none), ("tiny+plain", plain),
            ("tiny+softplus", softplus)]


# --------------------------------------------------------------------------------------------------------
# Unit checks


def check_short_conv():
    g = torch.Generator().manual_seed(1)
    T, C, W = 7, 5, 4
    x = torch.randn(T, C, generator=g, dtype=F64)
    w = torch.randn(C, 1, W, generator=g, dtype=F64)
    y = R.short_conv(x, w)
    ref = F.conv1d(F.pad(x.t()[None], (W - 1, 0)), w, groups=C)[0].t()
    close(y, ref, 1e-14, "short_conv = conv1d(left pad W-1)")
    e = torch.zeros(C, 1, W, dtype=F64)
    e[:, 0, W - 1] = 1
    close(R.short_conv(x, e), x, 0, "tap W-1 multiplies the current token")
    e = torch.zeros(C, 1, W, dtype=F64)
    e[:, 0, 0] = 1
    close(R.short_conv(x, e)[W - 1:], x[: T - W + 1], 0, "tap 0 multiplies token t-(W-1)")
    ok(R.short_conv(x, e)[: W - 1].abs().max().item() == 0, "zero initial conv state")


def kda_random(T, H, K, seed, lb=-5.0):
    g = torch.Generator().manual_seed(seed)
    q = R.l2_norm(torch.randn(T, H, K, generator=g, dtype=F64)) * K ** -0.5
    k = R.l2_norm(torch.randn(T, H, K, generator=g, dtype=F64))
    v = torch.randn(T, H, K, generator=g, dtype=F64)
    gate = lb * torch.sigmoid(3 * torch.randn(T, H, K, generator=g, dtype=F64))
    beta = torch.sigmoid(torch.randn(T, H, generator=g, dtype=F64))
    S0 = torch.randn(H, K, K, generator=g, dtype=F64)
    return q, k, v, gate, beta, S0


def check_kda_forms():
    q, k, v, g, beta, S0 = kda_random(37, 3, 8, 2)
    for s0 in (None, S0):
        o_r, S_r = R.kda_recurrent(q, k, v, g, beta, S0=s0)
        for chunk in (1, 3, 8, 16, 64):
            o_c, S_c = R.kda_chunkwise(q, k, v, g, beta, chunk=chunk, S0=s0)
            close(o_c, o_r, 1e-10, f"chunkwise KDA output (chunk {chunk}, S0 {'given' if s0 is not None else '0'})")
            close(S_c, S_r, 1e-10, f"chunkwise KDA final state (chunk {chunk})")
    # splitting the sequence and carrying the state = one pass (the fixed-size decode state)
    o1, S1 = R.kda_recurrent(q[:20], k[:20], v[:20], g[:20], beta[:20])
    o2, S2 = R.kda_recurrent(q[20:], k[20:], v[20:], g[20:], beta[20:], S0=S1)
    o_r, S_r = R.kda_recurrent(q, k, v, g, beta)
    close(torch.cat([o1, o2]), o_r, 1e-12, "KDA state carried across a split")
    # gradients of both forms agree
    ins = [t.clone().requires_grad_(True) for t in (q, k, v, g, beta)]
    w = torch.randn(o_r.shape, dtype=F64, generator=torch.Generator().manual_seed(3))
    ga = torch.autograd.grad((R.kda_recurrent(*ins)[0] * w).sum(), ins)
    gb = torch.autograd.grad((R.kda_chunkwise(*ins, chunk=8)[0] * w).sum(), ins)
    for a, b, n in zip(ga, gb, "q k v g beta".split()):
        close(b, a, 1e-10, f"chunkwise KDA gradient wrt {n}")
    # strongest decay over a long chunk stays finite (pairwise decays, no 1/exp(G))
    q, k, v, g, beta, _ = kda_random(200, 1, 4, 4)
    g = torch.full_like(g, -5.0)
    o_c, _ = R.kda_chunkwise(q, k, v, g, beta, chunk=200)
    o_r, _ = R.kda_recurrent(q, k, v, g, beta)
    ok(torch.isfinite(o_c).all().item(), "chunkwise KDA finite at g = lb over 200 tokens")
    close(o_c, o_r, 1e-10, "chunkwise KDA at g = lb")


def check_decay_bounds(cfg, W, name):
    P = R.prepare(W, F64, requires_grad=False)
    gen = torch.Generator().manual_seed(5)
    lb = cfg.linear_attn_config.gate_lower_bound
    for l in range(cfg.num_hidden_layers):
        if not cfg.is_kda(l):
            continue
        p = f"model.layers.{l}.self_attn."
        for scale in (1.0, 30.0):
            x = scale * torch.randn(50, cfg.hidden_size, generator=gen, dtype=F64)
            _, _, _, g, beta = R.kda_inputs(cfg, P, p, x)
            alpha = torch.exp(g)
            arg = torch.exp(P[p + "A_log"])[None, :, None] * (
                R.linear(R.linear(x, P[p + "f_a_proj.weight"]), P[p + "f_b_proj.weight"]) + P[p + "dt_bias"]
            ).view(g.shape)
            if lb is None:  # unbounded: g = -exp(A_log) softplus(.) < 0 exactly, alpha in [0, 1)
                ok(bool(((g < 0) & (alpha < 1) & (alpha >= 0)).all()), f"{name} layer {l}: alpha in [0, 1)")
                sp = -torch.exp(P[p + "A_log"])[None, :, None] * F.softplus(arg / torch.exp(P[p + "A_log"])[None, :, None])
                close(g, sp, 1e-12, f"{name} layer {l}: g = -exp(A_log) softplus(f)")
                continue
            inner = arg.abs() < 30  # where sigmoid is not saturated in f64, the bounds are strict
            ok(bool(((alpha > math.exp(lb)) & (alpha < 1))[inner].all()), f"{name} layer {l}: alpha in (e^lb, 1)")
            ok(bool(((alpha >= math.exp(lb) * (1 - 1e-15)) & (alpha <= 1)).all()), f"{name} layer {l}: alpha bounds")
            ok(bool(((beta > 0) & (beta <= 1)).all()), f"{name} layer {l}: beta in (0, 1]")


def check_situ():
    gen = torch.Generator().manual_seed(6)
    b1, b2 = 4.0, 25.0
    g = 1e3 * torch.randn(10000, generator=gen, dtype=F64)
    u = 1e3 * torch.randn(10000, generator=gen, dtype=F64)
    y = R.situ_glu(g, u, b1, b2)
    ok(bool((y.abs() <= b1 * b2).all()), "SiTU-GLU |y| <= b1 b2 for large inputs")
    ok(y.abs().max().item() > 0.9 * b1 * b2, "SiTU-GLU approaches its bound")
    g = torch.randn(1000, generator=gen, dtype=F64)
    u = torch.randn(1000, generator=gen, dtype=F64)
    close(R.situ_glu(g, u, 1e7, 1e7), F.silu(g) * u, 1e-10, "SiTU-GLU -> SwiGLU as b -> inf")
    close(R.situ_glu(torch.tensor([0.0], dtype=F64), torch.tensor([3.0], dtype=F64), b1, b2),
          torch.tensor([0.0], dtype=F64), 0, "SiTU-GLU(0, u) = 0")


def check_attn_res_read():
    gen = torch.Generator().manual_seed(7)
    T, D = 5, 16
    cands = [torch.randn(T, D, generator=gen, dtype=F64) * (i + 1) for i in range(4)]
    wn, wp = torch.randn(D, generator=gen, dtype=F64), torch.randn(1, D, generator=gen, dtype=F64)
    close(R.attn_res_read(wn, wp, cands[:1], 1e-5), cands[0], 1e-15, "AttnRes: one candidate is the identity")
    mean = torch.stack(cands).mean(0)
    close(R.attn_res_read(torch.zeros(D, dtype=F64), wp, cands, 1e-5), mean, 1e-14, "AttnRes: zero w_norm -> mean")
    close(R.attn_res_read(wn, torch.zeros(1, D, dtype=F64), cands, 1e-5), mean, 1e-14, "AttnRes: zero w_proj -> mean")
    # keys are normalised: scaling a candidate does not change its weight
    out = R.attn_res_read(wn, wp, cands, 1e-12)
    V = torch.stack(cands)
    p = torch.softmax((V @ (wn * wp[0])) / torch.sqrt(V.pow(2).mean(-1) + 1e-12), 0)
    close(out, (p[..., None] * V).sum(0), 1e-14, "AttnRes read formula")


def check_topk():
    key = torch.tensor([[0.5, 0.7, 0.7, 0.1, 0.7], [1.0, 1.0, 1.0, 1.0, 1.0]], dtype=F64)
    idx = R.topk_lowest_index(key, 2)
    ok(idx.tolist() == [[1, 2], [0, 1]], f"top-k ties go to the lower index: {idx.tolist()}")


def check_rope(cfg_yarn_dict):
    cfg = R.Config(cfg_yarn_dict)
    Dr = cfg.qk_rope_head_dim
    T = 40
    cos, sin, fac = R.rope_tables(cfg, T, F64)
    rs = cfg.rope_scaling
    cs = R.yarn_mscale(rs["factor"], rs["mscale"]) / R.yarn_mscale(rs["factor"], rs["mscale_all_dim"])
    close(cos.pow(2) + sin.pow(2), torch.full_like(cos, cs * cs), 1e-14, "YaRN cos^2 + sin^2 = mscale ratio^2")
    ok(abs(fac - R.yarn_mscale(rs["factor"], rs["mscale_all_dim"]) ** 2) < 1e-15, "YaRN softmax factor")
    # hand-computed inverse frequencies for this config: Dr 8, base 1e4, orig 512, factor 4 -> ramp [0, .5, 1, 1]
    inv = 10000.0 ** (-torch.arange(0, Dr, 2, dtype=F64) / Dr)
    extra = torch.tensor([1.0, 0.5, 0.0, 0.0], dtype=F64)
    want = inv * extra + inv / 4 * (1 - extra)
    close(cos[1, : Dr // 2], torch.cos(want) * cs, 1e-14, "YaRN inverse frequencies (position 1)")
    close(cos[:, Dr // 2:], cos[:, : Dr // 2], 0, "rotate-half layout: column j and j + Dr/2 share a frequency")
    # relative position: <R_m q, R_n k> depends on m - n only
    gen = torch.Generator().manual_seed(8)
    qv = torch.randn(Dr, dtype=F64, generator=gen).expand(T, Dr)
    kv = torch.randn(Dr, dtype=F64, generator=gen).expand(T, Dr)
    qr, kr = R.apply_rope(qv, cos / cs, sin / cs), R.apply_rope(kv, cos / cs, sin / cs)
    s = qr @ kr.t()
    for d in range(0, 5):
        diag = torch.diagonal(s, -d)
        ok((diag - diag[0]).abs().max().item() < 1e-12, f"RoPE score depends on relative position ({d})")
    # factor 1 YaRN = plain RoPE
    d1 = copy.deepcopy(cfg_yarn_dict)
    d1["rope_scaling"]["factor"] = 1.0
    d0 = copy.deepcopy(cfg_yarn_dict)
    d0.pop("rope_scaling")
    c1, s1, f1 = R.rope_tables(R.Config(d1), T, F64)
    c0, s0, f0 = R.rope_tables(R.Config(d0), T, F64)
    close(c1, c0, 1e-15, "YaRN factor 1 = plain RoPE (cos)")
    close(s1, s0, 1e-15, "YaRN factor 1 = plain RoPE (sin)")
    ok(f1 == f0 == 1.0, "YaRN factor 1: softmax scale unchanged")


def check_mla_forms(cfg, W, name, T):
    P = R.prepare(W, F64, requires_grad=False)
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(T, cfg.hidden_size, generator=gen, dtype=F64)
    for l in range(cfg.num_hidden_layers):
        if cfg.is_kda(l):
            continue
        p = f"model.layers.{l}.self_attn."
        a = R.mla(cfg, P, p, x, impl="naive")
        b = R.mla(cfg, P, p, x, impl="absorbed")
        close(b, a, 1e-10, f"{name} layer {l}: absorbed MLA = naive MLA")


def check_model_forms(cfg, W, name, tokens):
    la, lo, ga = R.loss_and_grads(cfg, W, tokens)
    lb, lob, gb = R.loss_and_grads(cfg, W, tokens, kda_impl="chunk", kda_chunk=4, mla_impl="absorbed")
    close(lb, la, 1e-10, f"{name}: logits, chunk KDA + absorbed MLA = recurrent + naive")
    close(lob, lo, 1e-12, f"{name}: loss, chunk + absorbed")
    for n in ga:
        close(gb[n], ga[n], 1e-9, f"{name}: grad {n}, chunk + absorbed")
    # causality: changing later tokens leaves earlier logits alone
    P = R.prepare(W, F64, requires_grad=False)
    with torch.no_grad():
        t2 = list(tokens)
        t2[-3:] = [(t + 7) % cfg.vocab_size for t in t2[-3:]]
        l2 = R.forward(cfg, P, t2)
        close(l2[:-3], la[:-3], 1e-12, f"{name}: causal")
        ok((l2[-1] - la[-1]).abs().max().item() > 1e-8, f"{name}: later logits do change")
    # float32 is close to float64
    l32, lo32, _ = R.loss_and_grads(cfg, W, tokens, dtype=torch.float32)
    close(l32.double(), la, 1e-4, f"{name}: f32 logits close to f64")
    return la, lo, ga


def routing_margin(cfg, W, tokens):
    P = R.prepare(W, F64, requires_grad=False)
    rec = {}
    with torch.no_grad():
        R.forward(cfg, P, tokens, rec=rec)
    m = float("inf")
    k = cfg.num_experts_per_token
    for key, v in rec.items():
        if key.endswith("router_key"):
            srt = v.sort(-1, descending=True).values
            m = min(m, (srt[:, k - 1] - srt[:, k]).min().item())
    return m


def check_finite_differences(cfg, W, name, tokens, grads, per_tensor, h=1e-6, rtol=1e-5, atol=2e-9):
    """Central differences in float64 on a sample of every parameter tensor: its largest-gradient element
    and random ones (for expert tensors only among the experts that were chosen)."""
    margin = routing_margin(cfg, W, tokens)
    ok(margin > 1e-5, f"{name}: routing margin {margin:.2e} too small for finite differences")
    P = R.prepare(W, F64, requires_grad=False)
    targets = R.default_targets(tokens)

    def loss():
        with torch.no_grad():
            return R.cross_entropy(R.forward(cfg, P, tokens), targets).item()

    gen = torch.Generator().manual_seed(10)
    n_checked, worst = 0, 0.0
    for n in sorted(grads):
        g = grads[n].reshape(-1)
        if g.abs().max().item() == 0:
            # dead parameters (an unchosen expert, layer 0's q_pre): the loss must not move either
            if ".experts." in n:
                continue
            picks = [0]
        else:
            picks = [int(g.abs().argmax())]
            big = (g.abs() > 1e-3 * g.abs().max()).nonzero().reshape(-1)
            for _ in range(per_tensor - 1):
                picks.append(int(big[torch.randint(len(big), (1,), generator=gen)]))
        flat = P[n].view(-1)
        for i in sorted(set(picks)):
            v0 = flat[i].item()
            flat[i] = v0 + h
            lp = loss()
            flat[i] = v0 - h
            lm = loss()
            flat[i] = v0
            fd = (lp - lm) / (2 * h)
            ag = g[i].item()
            err = abs(fd - ag)
            ok(err <= rtol * abs(ag) + atol, f"{name}: d loss / d {n}[{i}]: autograd {ag:.10e}, FD {fd:.10e}")
            worst = max(worst, err / (abs(ag) + 1e-30))
            n_checked += 1
    return n_checked, margin


def check_cli(tmp):
    py = sys.executable
    script = os.path.join(HERE, "kimi_ref.py")
    mdir = os.path.join(tmp, "model")
    cfgp = os.path.join(ROOT, "configs", "tiny.json")
    subprocess.run([py, script, "init", "--config", cfgp, "--out", mdir, "--seed", "3"], check=True,
                   stdout=subprocess.DEVNULL)
    out = os.path.join(tmp, "out.safetensors")
    tokens = [5, 17, 300, 42, 9, 100]
    subprocess.run([py, script, "run", "--model", mdir, "--tokens", ",".join(map(str, tokens)), "--targets",
                    "17,300,-100,9,100,7", "--out", out], check=True, stdout=subprocess.DEVNULL)
    from safetensors.torch import load_file

    got = load_file(out)
    cfg = R.load_config(mdir)
    W = load_file(os.path.join(mdir, "model.safetensors"))
    ok(json.load(open(os.path.join(mdir, "config.json"))) == load_json(cfgp), "init copies config.json")
    ok(all(t.dtype == torch.float32 for t in W.values()), "init writes float32")
    R.check_weights(cfg, W)
    ok(all(t.dtype == torch.float32 for t in got.values()), "run writes float32")
    logits, loss, grads = R.loss_and_grads(cfg, W, tokens, targets=[17, 300, -100, 9, 100, 7])
    close(got["logits"].double(), logits, 1e-6, "CLI logits")
    ok(got["loss"].shape == torch.Size([]) and abs(got["loss"].item() - loss.item()) < 1e-5, "CLI loss")
    want = {"logits", "loss"} | {"grad." + n for n in grads}
    ok(set(got) == want, f"CLI tensors: {sorted(set(got) ^ want)[:5]}")
    ok(len(grads) == sum(1 for n, _, _ in R.tensor_specs(cfg) if R.is_param(n)), "a gradient for every parameter")
    for n, g in grads.items():
        close(got["grad." + n].double(), g, 1e-6, f"CLI grad {n}")
    ok(not [f for f in os.listdir(tmp) if f.startswith(".tmp-")], "no temp files left")


def check_flagship_counts():
    cfg = R.load_config(os.path.join(ROOT, "configs", "kimi-k3.json"))
    total, act = R.count_params(cfg)
    ok(round(total / 1e12, 2) == 2.78, f"K3 total {total}")
    ok(round(act / 1e9, 1) == 104.2, f"K3 activated {act}")
    emb = cfg.vocab_size * cfg.hidden_size
    ok(round((act + emb) / 1e9, 1) == 105.4, f"K3 activated with embeddings {act + emb}")
    ok([cfg.is_kda(l) for l in range(cfg.num_hidden_layers)].count(True) == 69, "K3: 69 KDA layers")
    ok(cfg.mla_use_nope and cfg.latent and cfg.attn_res_mode == "block", "K3 defaults")


def main():
    t0 = time.time()
    check_short_conv()
    check_kda_forms()
    check_situ()
    check_attn_res_read()
    check_topk()
    vs = variants()
    check_rope(vs[1][1])
    print(f"unit checks passed ({time.time() - t0:.1f} s)", flush=True)
    tokens = [5, 17, 300, 42, 9, 100, 7, 256, 511, 1, 64, 3, 77]  # 13: not a multiple of the KDA chunk (4)
    for i, (name, d) in enumerate(vs):
        t1 = time.time()
        cfg = R.Config(d)
        W = R.init_weights(cfg, seed=100 + i, std=0.08)
        if cfg.linear_attn_config is not None:
            check_decay_bounds(cfg, W, name)
        check_mla_forms(cfg, W, name, T=11)
        logits, loss, grads = check_model_forms(cfg, W, name, tokens)
        n, margin = check_finite_differences(cfg, W, name, tokens, grads, per_tensor=2)
        print(f"{name}: loss {loss.item():.6f}; forms agree; {n} finite-difference checks pass "
              f"(routing margin {margin:.1e}) ({time.time() - t1:.1f} s)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        check_cli(tmp)
    check_flagship_counts()
    print(f"test_reference: all {CHECKS[0]} checks passed in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
