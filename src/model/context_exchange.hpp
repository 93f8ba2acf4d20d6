#pragma once
// What the layers ask of the ranks a sample's tokens are cut over (parallel.cp, DeepSpeed-Ulysses):
// the layers know the number of parts and their own, and hand tensors to these calls; the ranks and
// the transfers are the implementation's (train/ulysses_exchange.hpp). Null in a Flow at cp 1.
//
// Layouts (E: the bytes of one member's heads of one token, H/parts x head_dim elements):
//   local    [B, Lp, groups, parts, E]   this part's Lp tokens, every member's heads
//   gathered [B, parts, Lp, groups, E]   every part's tokens (part-major), this member's heads
// groups is 3 for attention's q|k|v rows, 1 for its output. A gathered row of qkv is then the row of
// a model with H/parts heads, so attention runs on it as on a whole sequence of parts x Lp tokens.
#include <cstddef>

namespace avtrain {

class ContextExchange {
 public:
  virtual ~ContextExchange() = default;
  virtual int parts() const = 0;
  virtual int part() const = 0;
  // Before attention (and its output gradient): local -> gathered. Collective over the parts.
  virtual void to_heads(const void* local, void* gathered, int B, int Lp, int groups, std::size_t head_bytes) = 0;
  // After attention (and its input gradient): gathered -> local. Collective over the parts.
  virtual void to_tokens(const void* gathered, void* local, int B, int Lp, int groups, std::size_t head_bytes) = 0;
  // x (tensor memory) summed over the parts, in place: the pooled head's sums over a sample's tokens.
  virtual void sum(float* x, std::size_t n) = 0;
};

}  // namespace avtrain
