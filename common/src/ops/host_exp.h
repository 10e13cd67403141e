// exp for the element kernels' host loops (device_kernels.h): branch-free, so that a loop over a
// functor that calls it vectorises (glibc's exp is a call per element). The argument is clamped to
// the range where the result is a normal number, reduced by multiples of ln 2 (Cody-Waite, two
// constants), and exp of the remainder (|r| <= ln 2 / 2) is its Taylor polynomial, of degree 13
// (float64) or 8 (float32), whose truncation is below half an ulp; 2^n is made from its bits.
// Relative error against std::exp over the whole clamped range: 2.3e-16 (float64), 1.2e-7
// (float32) (HostExp.MatchesTheLibrary). Outside it the result is that of the range's end:
// exp(-x) of a sigmoid then gives 1 / (1 + 8e307) for exp(-800), where the exact value is 0 in
// float64 anyway; NaN comes back as exp(709) (the kernels' own factor x carries it).
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace mlip::kernels {

inline double host_exp(double x) {
  x = x < 709.0 ? x : 709.0;
  x = x > -708.0 ? x : -708.0;
  const double shift = 0x1.8p52;  // adding it rounds to an integer, kept in the low mantissa bits
  const double k = x * 1.4426950408889634 + shift, n = k - shift;
  const double r = (x - n * 0.6931471803691238) - n * 1.9082149292705877e-10;  // ln 2, high and low
  double p = 1.0 / 6227020800.0;
  for (const double c : {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                         1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0})
    p = p * r + c;
  uint64_t bits;   // unsigned: n < 0 shifts a negative value (undefined for a signed one before C++20)
  std::memcpy(&bits, &k, sizeof bits);
  bits = ((bits - uint64_t(0x4338000000000000)) << 52) + uint64_t(0x3ff0000000000000);  // 2^n
  double scale;
  std::memcpy(&scale, &bits, sizeof bits);
  return p * scale;
}

inline float host_exp(float x) {
  x = x < 88.0f ? x : 88.0f;
  x = x > -87.0f ? x : -87.0f;
  const float shift = 0x1.8p23f;
  const float k = x * 1.44269504f + shift, n = k - shift;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 40320.0f;
  for (const float c : {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
    p = p * r + c;
  uint32_t bits;
  std::memcpy(&bits, &k, sizeof bits);
  bits = ((bits - uint32_t(0x4B400000)) << 23) + uint32_t(0x3f800000);
  float scale;
  std::memcpy(&scale, &bits, sizeof bits);
  return p * scale;
}

}  // namespace mlip::kernels
