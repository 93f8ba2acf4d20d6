#pragma once
// Audio front end, always fp32 and without parameters: frames of `window` samples every `hop`,
// a periodic Hann window, the power spectrum by a DFT written as one matrix product, an HTK-mel
// triangular filterbank (mel = 2595 log10(1 + f/700), 0 Hz .. Nyquist, unnormalised), log(x + 1e-6).
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "model/model_config.hpp"

namespace avtrain {

class LogMelFrontend {
 public:
  LogMelFrontend(const TokenGeometry& g, int mel_bins, int sample_rate);
  // audio[B, A] -> logmel[B, Tf, mel_bins]; frames at or past frame_mask = 0 are set to 0.
  void forward(Backend& be, const float* audio, std::int64_t A, const std::uint8_t* frame_mask,
               float* logmel, int B);
  int mel_bins() const { return mel_bins_; }

  // The filterbank as [bins, mel_bins], exposed for tests.
  const Buffer& filterbank() const { return filterbank_; }

 private:
  TokenGeometry g_;
  int mel_bins_;
  Buffer window_, dft_, filterbank_;  // [win], [win, 2*bins], [bins, mel_bins]
  Buffer frames_, spectrum_, power_;
};

}  // namespace avtrain
