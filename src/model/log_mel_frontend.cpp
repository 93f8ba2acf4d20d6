#include "model/log_mel_frontend.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace avtrain {

namespace {
double hz_to_mel(double f) { return 2595.0 * std::log10(1.0 + f / 700.0); }
double mel_to_hz(double m) { return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0); }
}  // namespace

LogMelFrontend::LogMelFrontend(const TokenGeometry& g, int mel_bins, int sample_rate)
    : g_(g), mel_bins_(mel_bins) {
  require(mel_bins >= 1, "model.mel_bins must be >= 1");
  const int win = g.window, nb = g.bins;
  // The constants are computed on the host and uploaded to wherever the tensors live.
  std::vector<float> window(win), dft(std::size_t(win) * 2 * nb), filterbank(std::size_t(nb) * mel_bins);
  for (int i = 0; i < win; ++i) window[i] = float(0.5 - 0.5 * std::cos(2.0 * M_PI * i / win));
  for (int i = 0; i < win; ++i)
    for (int k = 0; k < nb; ++k) {
      double phase = 2.0 * M_PI * double((std::int64_t(i) * k) % win) / win;
      dft[std::size_t(i) * 2 * nb + k] = float(std::cos(phase));
      dft[std::size_t(i) * 2 * nb + nb + k] = float(-std::sin(phase));
    }
  // Triangles between mel_bins + 2 points equally spaced in mel from 0 to the Nyquist frequency.
  const double top = hz_to_mel(sample_rate / 2.0);
  std::vector<double> edges(mel_bins + 2);
  for (int m = 0; m < mel_bins + 2; ++m) edges[m] = mel_to_hz(top * m / (mel_bins + 1));
  for (int k = 0; k < nb; ++k) {
    double f = double(k) * sample_rate / win;
    for (int m = 0; m < mel_bins; ++m) {
      double lo = edges[m], mid = edges[m + 1], hi = edges[m + 2];
      double up = (f - lo) / (mid - lo), down = (hi - f) / (hi - mid);
      filterbank[std::size_t(k) * mel_bins + m] = float(std::max(0.0, std::min(up, down)));
    }
  }
  window_.upload(window.data(), window.size());
  dft_.upload(dft.data(), dft.size());
  filterbank_.upload(filterbank.data(), filterbank.size());
}

void LogMelFrontend::forward(Backend& be, const float* audio, std::int64_t A, const std::uint8_t* frame_mask,
                             float* logmel, int B) {
  const int T = g_.frames, win = g_.window, nb = g_.bins, rows = B * T;
  frames_.resize(std::size_t(rows) * win);
  spectrum_.resize(std::size_t(rows) * 2 * nb);
  power_.resize(std::size_t(rows) * nb);
  be.frame_signal(audio, window_.data(), frames_.data(), B, A, T, win, g_.hop);
  be.gemm(Trans::no, Trans::no, rows, 2 * nb, win, 1.0f, frames_.data(), win, dft_.data(), 2 * nb, 0.0f,
          spectrum_.data(), 2 * nb);
  be.power_spectrum(spectrum_.data(), power_.data(), rows, nb);
  be.gemm(Trans::no, Trans::no, rows, mel_bins_, nb, 1.0f, power_.data(), nb, filterbank_.data(), mel_bins_,
          0.0f, logmel, mel_bins_);
  be.masked_log(logmel, frame_mask, rows, mel_bins_, 1e-6f);
}

}  // namespace avtrain
