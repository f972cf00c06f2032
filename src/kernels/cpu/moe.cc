// MoE router and token movement. Routing decisions (top-k, slot assignment) are sequential by
// definition (slot order is part of the semantics) and cheap (N*K integers); the softmax and the
// row moves run in parallel over tokens, each token writing only its own rows and slots.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {

int moe_capacity(int N, int E, int K, double capacity_factor) {
  const double c = std::ceil(capacity_factor * static_cast<double>(N) * K / E);
  return std::max(1, static_cast<int>(c));
}

float moe_router_forward(float* probs, int* expert_index, float* gate, int* slot, int* expert_count,
                         float* load_fraction, const float* logits, const MoeShape& s) {
  const int N = s.N, E = s.E, K = s.K;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* l = logits + static_cast<size_t>(n) * E;
    float* p = probs + static_cast<size_t>(n) * E;
    float mx = l[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) {
      p[e] = fast_exp(l[e] - mx);
      sum += p[e];
    }
    for (int e = 0; e < E; ++e) p[e] /= sum;
    // Top-k by repeated selection; K is small (1, 2, 8). Ties go to the lower expert index.
    int* idx = expert_index + static_cast<size_t>(n) * K;
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int j = 0; j < k; ++j) taken |= (idx[j] == e);
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      idx[k] = best;
      gate[static_cast<size_t>(n) * K + k] = p[best];
    }
  }
  // Slots: first choices of all tokens, then second choices, ... (GShard's priority order).
  std::fill(expert_count, expert_count + E, 0);
  std::vector<int> chosen(E, 0);
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) {
      const size_t a = static_cast<size_t>(n) * K + k;
      const int e = expert_index[a];
      ++chosen[e];
      if (expert_count[e] < s.capacity) {
        slot[a] = expert_count[e]++;
      } else {
        slot[a] = -1;
      }
    }
  }
  // aux = E * sum_e f_e * P_e
  std::vector<double> mean_prob(E, 0.0);
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e) mean_prob[e] += probs[static_cast<size_t>(n) * E + e];
  double aux = 0.0;
  for (int e = 0; e < E; ++e) {
    load_fraction[e] = static_cast<float>(static_cast<double>(chosen[e]) / (double(N) * K));
    aux += static_cast<double>(load_fraction[e]) * (mean_prob[e] / N);
  }
  return static_cast<float>(aux * E);
}

void moe_router_backward(float* dlogits, const float* dgate, const float* probs,
                         const int* expert_index, const int* slot, const float* load_fraction,
                         float aux_grad, const MoeShape& s) {
  const int N = s.N, E = s.E, K = s.K;
#pragma omp parallel
  {
    std::vector<float> dp(E);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* p = probs + static_cast<size_t>(n) * E;
      // d(aux)/d(p_ne) = E * f_e / N
      for (int e = 0; e < E; ++e) dp[e] = aux_grad * E * load_fraction[e] / N;
      for (int k = 0; k < K; ++k) {
        const size_t a = static_cast<size_t>(n) * K + k;
        if (slot[a] >= 0) dp[expert_index[a]] += dgate[a];
      }
      // softmax backward: dl_e = p_e (dp_e - sum_j p_j dp_j)
      float dot = 0.0f;
      for (int e = 0; e < E; ++e) dot += p[e] * dp[e];
      float* dl = dlogits + static_cast<size_t>(n) * E;
      for (int e = 0; e < E; ++e) dl[e] = p[e] * (dp[e] - dot);
    }
  }
}

void moe_dispatch(float* xe, const float* x, const int* expert_index, const int* slot,
                  const MoeShape& s, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; ++n) {
    for (int k = 0; k < s.K; ++k) {
      const size_t a = static_cast<size_t>(n) * s.K + k;
      if (slot[a] < 0) continue;
      float* dst = xe + (static_cast<size_t>(expert_index[a]) * s.capacity + slot[a]) * C;
      std::memcpy(dst, x + static_cast<size_t>(n) * C, sizeof(float) * C);
    }
  }
}

void moe_dispatch_backward(float* dx, const float* dxe, const int* expert_index, const int* slot,
                           const MoeShape& s, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; ++n) {
    float* d = dx + static_cast<size_t>(n) * C;
    std::memset(d, 0, sizeof(float) * C);
    for (int k = 0; k < s.K; ++k) {
      const size_t a = static_cast<size_t>(n) * s.K + k;
      if (slot[a] < 0) continue;
      const float* src = dxe + (static_cast<size_t>(expert_index[a]) * s.capacity + slot[a]) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) d[c] += src[c];
    }
  }
}

void moe_combine(float* out, const float* ye, const float* gate, const int* expert_index,
                 const int* slot, const MoeShape& s, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; ++n) {
    float* o = out + static_cast<size_t>(n) * C;
    std::memset(o, 0, sizeof(float) * C);
    for (int k = 0; k < s.K; ++k) {
      const size_t a = static_cast<size_t>(n) * s.K + k;
      if (slot[a] < 0) continue;
      const float g = gate[a];
      const float* y = ye + (static_cast<size_t>(expert_index[a]) * s.capacity + slot[a]) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] += g * y[c];
    }
  }
}

void moe_combine_backward(float* dye, float* dgate, const float* dout, const float* ye,
                          const float* gate, const int* expert_index, const int* slot,
                          const MoeShape& s, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; ++n) {
    const float* d = dout + static_cast<size_t>(n) * C;
    for (int k = 0; k < s.K; ++k) {
      const size_t a = static_cast<size_t>(n) * s.K + k;
      if (slot[a] < 0) {
        dgate[a] = 0.0f;
        continue;
      }
      const size_t row = (static_cast<size_t>(expert_index[a]) * s.capacity + slot[a]) * C;
      const float* y = ye + row;
      float* dy = dye + row;
      const float g = gate[a];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) {
        dot += d[c] * y[c];
        dy[c] = g * d[c];
      }
      dgate[a] = dot;
    }
  }
}

}  // namespace cann::kernels
