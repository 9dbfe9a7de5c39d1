//! Scalar math the reference tier and the host kernels share: GELU in its two forms,
//! in f64 (the reference) and f32 (the generic tier).

/// GELU with the exact erf: `x/2 * (1 + erf(x / sqrt 2))`.
pub fn gelu_erf_f64(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}
/// GELU's tanh approximation: `x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.
pub fn gelu_tanh_f64(x: f64) -> f64 {
    const C: f64 = 0.797_884_560_802_865_4; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}
/// The logistic function `1 / (1 + e^-x)`, computed from `e^-|x|` so that neither end
/// overflows: exactly 0 at `-inf`, 1 at `+inf`, NaN stays NaN.
pub fn sigmoid_f64(x: f64) -> f64 {
    let e = (-x.abs()).exp();
    if x >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) }
}
/// [`sigmoid_f64`] in f32.
pub fn sigmoid_f32(x: f32) -> f32 {
    let e = (-x.abs()).exp();
    if x >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) }
}
/// [`gelu_erf_f64`] in f32.
pub fn gelu_erf_f32(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}
/// [`gelu_tanh_f64`] in f32.
pub fn gelu_tanh_f32(x: f32) -> f32 {
    const C: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}
/// SiLU `x * sigmoid(x)` in IEEE arithmetic: `silu(-inf) = -inf * 0 = NaN`.
pub fn silu_f64(x: f64) -> f64 {
    x * sigmoid_f64(x)
}
/// [`silu_f64`] in f32.
pub fn silu_f32(x: f32) -> f32 {
    x * sigmoid_f32(x)
}
