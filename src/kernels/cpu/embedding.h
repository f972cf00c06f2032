// Token plus learned position embedding, the input layer of GPT and BERT.
#pragma once

namespace cann::kernels {

// tokens is (B,T) with values in [0,V); wte is (V,C); wpe is (maxT,C), maxT >= T; out is (B,T,C).
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
// dwte (V,C) and dwpe (maxT,C) accumulate; dout is (B,T,C). wpe and dwpe may be null: a model
// with rotary positions has no position table.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                        int T, int C);

// Vocabulary-parallel form (Megatron's tensor-parallel embedding): wte_shard holds the rows of
// tokens [v_begin, v_end) only; out gets wte_shard[token - v_begin] for tokens in the range and
// 0 for the others, plus wpe when wpe is not null (one rank adds it, so the sum over the ranks'
// partial outputs is the full embedding).
void embedding_forward_vocab_range(float* out, const int* tokens, const float* wte_shard,
                                   const float* wpe, int B, int T, int C, int v_begin, int v_end);
// dwte_shard accumulates the rows of tokens in [v_begin, v_end); dwpe (maxT,C), when not null,
// accumulates all.
void embedding_backward_vocab_range(float* dwte_shard, float* dwpe, const float* dout,
                                    const int* tokens, int B, int T, int C, int v_begin, int v_end);

}  // namespace cann::kernels
