#pragma once
// Central finite differences against analytic gradients, coordinate by coordinate.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.hpp"
#include "core/keyed_random.hpp"

namespace avtrain {

// x = n values of N(0, std^2) keyed by (seed, key).
inline void fill_random(Buffer& x, std::size_t n, std::uint64_t seed, const std::string& key, double std = 1.0) {
  x.resize(n);
  KeyedRandom rng(seed, key);
  for (std::size_t i = 0; i < n; ++i) x[i] = float(std * rng.normal());
}

}  // namespace avtrain

namespace avtrain::testing {

struct GradCheckResult {
  double worst = 0;   // max over checked coordinates of |fd - analytic| / tolerance; <= 1 passes
  std::string where;  // the worst coordinate
  int checked = 0;
};

// For `count` coordinates of x[n] (all when n <= count), compares (f(x+h) - f(x-h)) / 2h with
// analytic[i]. Tolerance: atol * scale + rtol * |analytic|, scale = max(max |analytic| over x, 0.03):
// the floor covers tensors whose true gradient is zero (a bias before BatchNorm), where only
// rounding noise remains.
inline GradCheckResult check_gradient(const std::string& name, float* x, const float* analytic, std::size_t n,
                                      const std::function<double()>& f, int count = 24, double h = 1e-2,
                                      double rtol = 2e-2, double atol = 3e-3) {
  GradCheckResult r;
  double scale = 0;
  for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(double(analytic[i])));
  KeyedRandom pick(7, name);
  std::vector<std::size_t> idx;
  if (n <= std::size_t(count)) {
    for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int c = 0; c < count; ++c) idx.push_back(pick.below(n));
  }
  for (std::size_t i : idx) {
    const float saved = x[i];
    x[i] = float(saved + h);
    const double up = f();
    x[i] = float(saved - h);
    const double down = f();
    x[i] = saved;
    const double fd = (up - down) / (double(float(saved + h)) - double(float(saved - h)));
    const double tol = atol * std::max(scale, 3e-2) + rtol * std::fabs(double(analytic[i]));
    const double ratio = std::fabs(fd - analytic[i]) / tol;
    ++r.checked;
    if (ratio > r.worst) {
      r.worst = ratio;
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s[%zu]: fd %.6g analytic %.6g", name.c_str(), i, fd, double(analytic[i]));
      r.where = buf;
    }
  }
  return r;
}

}  // namespace avtrain::testing
