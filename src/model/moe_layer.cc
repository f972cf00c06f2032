// MoE feed-forward forward and backward. Each expert's MLP runs over exactly the rows routed to
// it (expert_count[e]), as two GEMMs on a contiguous slice of the expert buffer.
#include "model/moe_layer.h"

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"

namespace cann::model {

using namespace cann::kernels;

float moe_forward(float* out, const float* x, const float* params, const MoeOffsets& o, MoeActs& a,
                  const MoeDims& d, int N) {
  const int C = d.C, FM = d.FM, E = d.E;
  a.shape = MoeShape{N, E, d.K, moe_capacity(N, E, d.K, d.capacity_factor)};
  const int cap = a.shape.capacity;
  linear_forward(a.router_logits, x, params + o.routerw, nullptr, N, C, E);
  a.aux = moe_router_forward(a.probs, a.expert_index, a.gate, a.slot, a.expert_count,
                             a.load_fraction, a.router_logits, a.shape);
  moe_dispatch(a.xe, x, a.expert_index, a.slot, a.shape, C);
  for (int e = 0; e < E; ++e) {
    const int rows = a.expert_count[e];
    if (rows == 0) continue;
    const size_t xe_off = static_cast<size_t>(e) * cap * C;
    const size_t he_off = static_cast<size_t>(e) * cap * FM;
    linear_forward(a.he + he_off, a.xe + xe_off, params + o.fcw + static_cast<size_t>(e) * FM * C,
                   params + o.fcb + static_cast<size_t>(e) * FM, rows, C, FM);
    gelu_forward(a.ge + he_off, a.he + he_off, static_cast<size_t>(rows) * FM);
    linear_forward(a.ye + xe_off, a.ge + he_off, params + o.projw + static_cast<size_t>(e) * C * FM,
                   params + o.projb + static_cast<size_t>(e) * C, rows, FM, C);
  }
  moe_combine(out, a.ye, a.gate, a.expert_index, a.slot, a.shape, C);
  return a.aux;
}

void moe_backward(float* dx, float* grads, const float* dout, const float* x, const float* params,
                  const MoeOffsets& o, const MoeActs& a, const MoeScratch& s, const MoeDims& d,
                  float aux_grad, float* scratch_nc) {
  const int C = d.C, FM = d.FM, E = d.E, N = a.shape.N;
  const int cap = a.shape.capacity;
  moe_combine_backward(s.d_ye, s.d_gate, dout, a.ye, a.gate, a.expert_index, a.slot, a.shape, C);
  for (int e = 0; e < E; ++e) {
    const int rows = a.expert_count[e];
    if (rows == 0) continue;
    const size_t xe_off = static_cast<size_t>(e) * cap * C;
    const size_t he_off = static_cast<size_t>(e) * cap * FM;
    const size_t projw = o.projw + static_cast<size_t>(e) * C * FM;
    const size_t fcw = o.fcw + static_cast<size_t>(e) * FM * C;
    linear_backward(s.d_ge + he_off, grads + projw, grads + o.projb + static_cast<size_t>(e) * C,
                    s.d_ye + xe_off, a.ge + he_off, params + projw, rows, FM, C);
    gelu_backward(s.d_ge + he_off, a.he + he_off, s.d_ge + he_off, static_cast<size_t>(rows) * FM);
    linear_backward(s.d_xe + xe_off, grads + fcw, grads + o.fcb + static_cast<size_t>(e) * FM,
                    s.d_ge + he_off, a.xe + xe_off, params + fcw, rows, C, FM);
  }
  moe_dispatch_backward(dx, s.d_xe, a.expert_index, a.slot, a.shape, C);
  moe_router_backward(s.d_router, s.d_gate, a.probs, a.expert_index, a.slot, a.load_fraction,
                      aux_grad, a.shape);
  // The router reads x too: its input gradient joins the experts' in dx.
  linear_backward(scratch_nc, grads + o.routerw, nullptr, s.d_router, x, params + o.routerw, N, C,
                  E);
  residual_backward(dx, scratch_nc, static_cast<size_t>(N) * C);
}

}  // namespace cann::model
