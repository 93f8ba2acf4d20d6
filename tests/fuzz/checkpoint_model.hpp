#pragma once
// The small stage the checkpoint target loads into and its seeds were written from
// (fuzz_checkpoint.cpp, write_checkpoint_seeds.cpp): two linear layers, a weight with a working copy
// in bf16 (the masters split under ZeRO), the fingerprint a run of it records.
#include <nlohmann/json.hpp>

#include "model/param_store.hpp"

namespace avtrain::fuzz {

inline void add_checkpoint_model(ParamStore& store) {
  for (const char* module : {"a", "b"}) {
    store.add(module, "weight", {4, 3}, Init::normal, 0.5f, true);
    store.add(module, "bias", {4}, Init::zeros, 0.0f, false);
  }
}

inline nlohmann::json checkpoint_fingerprint() {
  return {{"model", {{"width", 4}, {"depth", 2}}}, {"seed", 1}, {"global_batch", 8}};
}

// The files of one checkpoint within one input: stage-0.h5, then, after each kNextFile, the next
// replica's part (stage-0.part-R.h5), as a ZeRO stage writes them.
inline constexpr std::string_view kNextFile = "\n%%avtrain-fuzz-next-file%%\n";

}  // namespace avtrain::fuzz
