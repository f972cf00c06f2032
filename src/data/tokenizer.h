// Byte-level tokenizer: token i is byte i (vocabulary 256). No merges, no unknown tokens: any
// text round-trips exactly.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cann::data {

constexpr int kByteVocab = 256;

std::vector<int> encode_bytes(std::string_view text);
// Tokens outside [0,256) (a model's special ids, like BERT's [MASK]) are written as U+FFFD.
std::string decode_bytes(std::span<const int> tokens);

}  // namespace cann::data
