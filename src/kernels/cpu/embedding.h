// Token plus learned position embedding, the input layer of GPT and BERT.
#pragma once

namespace cann::kernels {

// tokens is (B,T) with values in [0,V); wte is (V,C); wpe is (maxT,C), maxT >= T; out is (B,T,C).
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
// dwte (V,C) and dwpe (maxT,C) accumulate; dout is (B,T,C).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                        int T, int C);

}  // namespace cann::kernels
