// Reference Kimi Delta Attention (docs/design.md §1.2): the recurrent form, token by token, and its backward through
// the same recurrence with every state kept (it is the oracle; the fast kernels keep states only at chunk
// boundaries). T = float or double.
// Shapes: q, k, g [B, T, H, K]; v [B, T, H, V]; beta [B, T, H]; S0, S_out [B, H, K, V]; o [B, T, H, V].
// q and k arrive L2-normalised (q also scaled by K^-1/2); g is the per-channel log-decay (alpha = e^g).
// Per token and head:  S <- Diag(alpha) S;  u = v - S^T k;  S <- S + beta k u^T;  o = S^T q.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace myriad::ref {

template <class T>
void kda_recurrent_forward(T* o, T* S_out, const T* q, const T* k, const T* v, const T* g, const T* beta, const T* S0,
                           int64_t B, int64_t Tn, int64_t H, int64_t K, int64_t V) {
  std::vector<T> S(static_cast<size_t>(K * V)), u(static_cast<size_t>(V));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < K * V; ++i) S[size_t(i)] = S0 ? S0[(b * H + h) * K * V + i] : T(0);
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t r = (b * Tn + t) * H + h;
        const T* qt = q + r * K;
        const T* kt = k + r * K;
        const T* vt = v + r * V;
        const T* gt = g + r * K;
        for (int64_t c = 0; c < K; ++c)
          for (int64_t e = 0; e < V; ++e) S[size_t(c * V + e)] *= std::exp(gt[c]);
        for (int64_t e = 0; e < V; ++e) {
          T acc = 0;
          for (int64_t c = 0; c < K; ++c) acc += S[size_t(c * V + e)] * kt[c];
          u[size_t(e)] = vt[e] - acc;
        }
        for (int64_t c = 0; c < K; ++c)
          for (int64_t e = 0; e < V; ++e) S[size_t(c * V + e)] += beta[r] * kt[c] * u[size_t(e)];
        for (int64_t e = 0; e < V; ++e) {
          T acc = 0;
          for (int64_t c = 0; c < K; ++c) acc += S[size_t(c * V + e)] * qt[c];
          o[r * V + e] = acc;
        }
      }
      if (S_out)
        for (int64_t i = 0; i < K * V; ++i) S_out[(b * H + h) * K * V + i] = S[size_t(i)];
    }
}

// Backward: accumulates into dq, dk, dv, dg, dbeta and dS0 (if not null). dS_out (may be null) is the
// gradient arriving at the final state (from a following piece of the sequence).
template <class T>
void kda_recurrent_backward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS0, const T* dout, const T* dS_out, const T* q,
                            const T* k, const T* v, const T* g, const T* beta, const T* S0, int64_t B, int64_t Tn,
                            int64_t H, int64_t K, int64_t V) {
  const size_t KV = size_t(K * V);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      // Forward again, keeping every state: prev[t] = S_{t-1}, decayed[t] = Diag(alpha_t) S_{t-1}, u[t].
      std::vector<T> prev(size_t(Tn) * KV), dec(size_t(Tn) * KV), us(size_t(Tn * V)), S(KV);
      for (size_t i = 0; i < KV; ++i) S[i] = S0 ? S0[size_t((b * H + h) * K * V) + i] : T(0);
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t r = (b * Tn + t) * H + h;
        std::copy(S.begin(), S.end(), prev.begin() + size_t(t) * KV);
        for (int64_t c = 0; c < K; ++c)
          for (int64_t e = 0; e < V; ++e) S[size_t(c * V + e)] *= std::exp(g[r * K + c]);
        std::copy(S.begin(), S.end(), dec.begin() + size_t(t) * KV);
        for (int64_t e = 0; e < V; ++e) {
          T acc = 0;
          for (int64_t c = 0; c < K; ++c) acc += S[size_t(c * V + e)] * k[r * K + c];
          us[size_t(t * V + e)] = v[r * V + e] - acc;
        }
        for (int64_t c = 0; c < K; ++c)
          for (int64_t e = 0; e < V; ++e) S[size_t(c * V + e)] += beta[r] * k[r * K + c] * us[size_t(t * V + e)];
      }
      // Reverse. dS holds d loss / d S_t (the state after token t).
      std::vector<T> dS(KV), du(static_cast<size_t>(V));
      for (size_t i = 0; i < KV; ++i) dS[i] = dS_out ? dS_out[size_t((b * H + h) * K * V) + i] : T(0);
      for (int64_t t = Tn - 1; t >= 0; --t) {
        const int64_t r = (b * Tn + t) * H + h;
        const T* Sp = dec.data() + size_t(t) * KV;  // S'_t
        const T* ut = us.data() + size_t(t * V);
        // S_t = S'_t + beta k u^T, recomputed for o = S_t^T q
        for (int64_t c = 0; c < K; ++c) {
          T acc = 0;
          for (int64_t e = 0; e < V; ++e) {
            const T St = Sp[c * V + e] + beta[r] * k[r * K + c] * ut[e];
            acc += St * dout[r * V + e];
            dS[size_t(c * V + e)] += q[r * K + c] * dout[r * V + e];
          }
          dq[r * K + c] += acc;
        }
        // through S_t = S'_t + beta k u^T
        T db = 0;
        for (int64_t e = 0; e < V; ++e) {
          T acc = 0;
          for (int64_t c = 0; c < K; ++c) acc += dS[size_t(c * V + e)] * k[r * K + c];
          du[size_t(e)] = beta[r] * acc;
          db += acc * ut[e];
        }
        dbeta[r] += db;
        for (int64_t c = 0; c < K; ++c) {
          T acc = 0;
          for (int64_t e = 0; e < V; ++e) acc += dS[size_t(c * V + e)] * ut[e];
          dk[r * K + c] += beta[r] * acc;
        }
        // through u = v - S'^T k
        for (int64_t e = 0; e < V; ++e) dv[r * V + e] += du[size_t(e)];
        for (int64_t c = 0; c < K; ++c) {
          T acc = 0;
          for (int64_t e = 0; e < V; ++e) {
            acc += Sp[c * V + e] * du[size_t(e)];
            dS[size_t(c * V + e)] -= k[r * K + c] * du[size_t(e)];  // now d/dS'_t
          }
          dk[r * K + c] -= acc;
        }
        // through S'_t = Diag(alpha) S_{t-1}
        const T* Sprev = prev.data() + size_t(t) * KV;
        for (int64_t c = 0; c < K; ++c) {
          const T a = std::exp(g[r * K + c]);
          T acc = 0;
          for (int64_t e = 0; e < V; ++e) {
            acc += dS[size_t(c * V + e)] * Sprev[c * V + e];
            dS[size_t(c * V + e)] *= a;
          }
          dg[r * K + c] += acc * a;
        }
      }
      if (dS0)
        for (size_t i = 0; i < KV; ++i) dS0[size_t((b * H + h) * K * V) + i] += dS[i];
    }
}

// KDA's gate (ops/kernels.h kda_gate_forward): g [T, H, K] from f [T, H, K], A_log [H], dt_bias [H K]; bounded
// (lower_bound finite) or unbounded (lower_bound -infinity: -exp(A_log) softplus). softplus in the plain formula
// log(1 + e^z) (the oracle has no threshold; above 20 the two differ by < e^-20 relative).
template <class T>
void kda_gate_forward(T* g, const T* f, const T* A_log, const T* dt_bias, int64_t Tn, int64_t H, int64_t K,
                      T lower_bound) {
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < K; ++c) {
        const int64_t i = (t * H + h) * K + c;
        const T a = std::exp(A_log[h]), z = f[i] + dt_bias[h * K + c];
        g[i] = std::isinf(lower_bound) ? -a * std::log1p(std::exp(z)) : lower_bound / (T(1) + std::exp(-a * z));
      }
}

// Its backward: df = dg dg/dz; ddt_bias[h K + c] += sum over t of the same; dA_log[h] += sum of dg dg/dA_log.
//   bounded:   g = lb s(a z), s the sigmoid: dg/dz = lb s (1 - s) a, dg/dA_log = lb s (1 - s) a z
//   unbounded: g = -a softplus(z):           dg/dz = -a s(z),       dg/dA_log = g
template <class T>
void kda_gate_backward(T* df, T* dA_log, T* ddt_bias, const T* dg, const T* f, const T* A_log, const T* dt_bias,
                       int64_t Tn, int64_t H, int64_t K, T lower_bound) {
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < K; ++c) {
        const int64_t i = (t * H + h) * K + c;
        const T a = std::exp(A_log[h]), z = f[i] + dt_bias[h * K + c];
        T dz, da;
        if (std::isinf(lower_bound)) {
          dz = -a / (T(1) + std::exp(-z));
          da = -a * std::log1p(std::exp(z));
        } else {
          const T s = T(1) / (T(1) + std::exp(-a * z));
          dz = lower_bound * s * (T(1) - s) * a;
          da = lower_bound * s * (T(1) - s) * a * z;
        }
        if (df) df[i] += dg[i] * dz;
        if (ddt_bias) ddt_bias[h * K + c] += dg[i] * dz;
        if (dA_log) dA_log[h] += dg[i] * da;
      }
}

}  // namespace myriad::ref
