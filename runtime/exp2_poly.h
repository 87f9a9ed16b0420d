// The softmax's exp2 polynomial, shared by the kernels that evaluate 2^x as
// 2^n * p(f), n = round(x), f = x - n in [-0.5, 0.5]: simd's Exp2 (every
// ISA but the scalar fallback) and the compiled tier's AVX-512 lowering of
// math.exp2 (compiled/math_approximation_pass.cc). Horner from the highest
// degree:
//   p = kExp2Nearest[0]; p = p * f + kExp2Nearest[i] (i = 1..5); p = p * f + 1
// Cephes exp2f's coefficients (~2 ulp on [-0.5, 0.5]). p(0) is exactly 1, so
// exp2(0) -- the rescale factor of a running max that did not move -- is
// exactly 1 and rescales nothing.
#ifndef ATTNKIT_RUNTIME_EXP2_POLY_H_
#define ATTNKIT_RUNTIME_EXP2_POLY_H_

namespace attnkit {

inline constexpr float kExp2Nearest[6] = {
    1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
    5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f};

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_EXP2_POLY_H_
