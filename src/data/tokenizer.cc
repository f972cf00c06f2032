// The byte-level tokenizer: the identity map between bytes and ids 0..255. Every language-model
// demo on text (fortunes, a user's files) uses it, so a corpus needs no vocabulary file and any
// model output can be printed.
#include "data/tokenizer.h"

namespace cann::data {

std::vector<int> encode_bytes(std::string_view text) {
  std::vector<int> tokens(text.size());
  // Through unsigned char: a plain char is signed on x86, and byte 0xE9 must become 233, not -23.
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string decode_bytes(std::span<const int> tokens) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
  std::string text;
  text.reserve(tokens.size());
  for (int t : tokens) {
    if (t >= 0 && t < kByteVocab) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else {
      text.append(kReplacement, sizeof(kReplacement) - 1);
    }
  }
  return text;
}

}  // namespace cann::data
