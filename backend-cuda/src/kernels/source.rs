//! CUDA C source of the NVRTC kernels, generated per (tier, dtype).
//!
//! One module per tier and storage dtype: a shared prelude (parameter block, f16/bf16
//! conversions written in PTX so no toolkit header is needed, saturating float-to-integer
//! and wrapping integer-to-integer conversions, block reductions) and templated kernels, instantiated by `extern "C"`
//! entry points named `npurt_<kernel>_<dtype>_<tier>`. Pure string generation: no GPU.

use runtime::{DType, Tier};

/// The kernels a module can contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kern {
    Binary,
    Unary,
    BiasGelu,
    Softmax,
    LayerNorm,
    Reduce,
    Matmul,
    Attention,
    /// Strided element copy (Copy, Permute, broadcast fills).
    Copy,
    /// Gather with i32 / i64 indices.
    Gather(DType),
    /// Cast to the given dtype.
    Cast(DType),
    /// `a == b` into a u8 output.
    Equal,
    /// `condition ? x : y` with a u8 condition.
    Where,
    /// Strided element copy into strided places of the output (Concat's blocks).
    Place,
    /// KvCacheWrite with i32 / i64 slots: rows into both caches, in place.
    KvWrite(DType),
    /// PagedAttention (i32 block tables and context lengths).
    Paged,
    /// RmsNorm over the last axis, and AddRmsNorm (the sum written as a second output).
    RmsNorm,
    /// `silu(gate) * up`, gate and up the halves of x's last axis or two inputs.
    SwiGlu,
    /// Rope with f32 tables and positions of the given dtype.
    Rope(DType),
}

impl Kern {
    pub fn stem(self) -> String {
        match self {
            Kern::Binary => "binary".into(),
            Kern::Unary => "unary".into(),
            Kern::BiasGelu => "bias_gelu".into(),
            Kern::Softmax => "softmax".into(),
            Kern::LayerNorm => "layer_norm".into(),
            Kern::Reduce => "reduce".into(),
            Kern::Matmul => "matmul".into(),
            Kern::Attention => "attention".into(),
            Kern::Copy => "copy".into(),
            Kern::Gather(i) => format!("gather_{}", i.name()),
            Kern::Cast(to) => format!("cast_{}", to.name()),
            Kern::Equal => "equal".into(),
            Kern::Where => "where".into(),
            Kern::Place => "place".into(),
            Kern::KvWrite(i) => format!("kv_write_{}", i.name()),
            Kern::Paged => "paged_attention".into(),
            Kern::RmsNorm => "rms_norm".into(),
            Kern::SwiGlu => "swiglu".into(),
            Kern::Rope(i) => format!("rope_{}", i.name()),
        }
    }
}

pub fn tier_tag(t: Tier) -> &'static str {
    match t {
        Tier::Reference => "ref",
        Tier::Generic => "gen",
        Tier::HighPerformance => "fast",
    }
}

/// The C type a dtype is stored as in the kernels.
pub fn ctype(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "h16",
        DType::BF16 => "b16",
        DType::I32 => "int",
        DType::I64 => "ll",
        DType::U8 => "u8",
    }
}

/// The entry point name of `k` in the module of (`tier`, `dtype`).
pub fn entry_name(k: Kern, dtype: DType, tier: Tier) -> String {
    format!("npurt_{}_{}_{}", k.stem(), dtype.name(), tier_tag(tier))
}

/// The kernels the module of (`tier`, `dtype`) contains.
pub fn kernels(tier: Tier, dtype: DType) -> Vec<Kern> {
    let float = dtype.is_float();
    let int_arith = dtype.is_int();
    let mut v = Vec::new();
    match tier {
        Tier::Reference => {
            if float {
                v.extend([
                    Kern::Binary,
                    Kern::Unary,
                    Kern::BiasGelu,
                    Kern::Softmax,
                    Kern::LayerNorm,
                    Kern::Reduce,
                    Kern::Matmul,
                    Kern::Attention,
                    Kern::KvWrite(DType::I32),
                    Kern::KvWrite(DType::I64),
                    Kern::Paged,
                    Kern::RmsNorm,
                    Kern::SwiGlu,
                    Kern::Rope(DType::I32),
                    Kern::Rope(DType::I64),
                ]);
            } else if int_arith {
                v.push(Kern::Binary);
            }
            v.extend([
                Kern::Copy,
                Kern::Gather(DType::I32),
                Kern::Gather(DType::I64),
                Kern::Equal,
                Kern::Where,
                Kern::Place,
            ]);
            v.extend(DType::ALL.iter().map(|&t| Kern::Cast(t)));
        }
        Tier::Generic => {
            if float {
                v.extend([
                    Kern::Binary,
                    Kern::Unary,
                    Kern::BiasGelu,
                    Kern::Softmax,
                    Kern::LayerNorm,
                    Kern::Reduce,
                    Kern::Matmul,
                    Kern::RmsNorm,
                    Kern::SwiGlu,
                ]);
            } else if int_arith {
                v.push(Kern::Binary);
            }
            v.push(Kern::Equal);
        }
        Tier::HighPerformance => {
            if float {
                v.extend([Kern::Binary, Kern::Unary, Kern::BiasGelu, Kern::Softmax, Kern::LayerNorm, Kern::Attention]);
                v.extend([Kern::RmsNorm, Kern::SwiGlu]);
            } else if int_arith {
                v.push(Kern::Binary);
            }
        }
    }
    v
}

/// Every entry point of the module of (`tier`, `dtype`).
pub fn entry_points(tier: Tier, dtype: DType) -> Vec<String> {
    kernels(tier, dtype).into_iter().map(|k| entry_name(k, dtype, tier)).collect()
}

/// A short, unique module name (for logs and the NVRTC program name).
pub fn module_name(tier: Tier, dtype: DType) -> String {
    format!("npurt_{}_{}.cu", dtype.name(), tier_tag(tier))
}

/// The complete source of the module of (`tier`, `dtype`); `None` when it has no kernel.
pub fn module_source(tier: Tier, dtype: DType) -> Option<String> {
    let ks = kernels(tier, dtype);
    if ks.is_empty() {
        return None;
    }
    let mut s = String::with_capacity(PRELUDE.len() + KERNELS.len() + 4096);
    s.push_str(&format!("// npurt generated module: tier {}, dtype {}\n", tier.name(), dtype.name()));
    s.push_str(PRELUDE);
    s.push_str(KERNELS);
    let t = ctype(dtype);
    let tag = tier_tag(tier);
    for k in ks {
        let name = entry_name(k, dtype, tier);
        let body = match (k, tier) {
            (Kern::Binary, _) => {
                format!("(P p, const {t}* a, const {t}* b, {t}* o) {{ k_binary_{tag}<{t}>(p, a, b, o); }}")
            }
            (Kern::Unary, _) => format!("(P p, const {t}* x, {t}* o) {{ k_unary_{tag}<{t}>(p, x, o); }}"),
            (Kern::BiasGelu, _) => {
                format!("(P p, const {t}* x, const {t}* b, {t}* o) {{ k_bias_gelu_{tag}<{t}>(p, x, b, o); }}")
            }
            (Kern::Softmax, _) => format!("(P p, const {t}* x, {t}* o) {{ k_softmax_{tag}<{t}>(p, x, o); }}"),
            (Kern::LayerNorm, _) => format!(
                "(P p, const {t}* x, const {t}* r, const {t}* g, const {t}* b, {t}* o) {{ k_layer_norm_{tag}<{t}>(p, x, r, g, b, o); }}"
            ),
            (Kern::Reduce, _) => format!("(P p, const {t}* x, {t}* o) {{ k_reduce_{tag}<{t}>(p, x, o); }}"),
            (Kern::Matmul, _) => format!(
                "(P p, const {t}* a, const {t}* b, const {t}* c, {t}* o) {{ k_matmul_{tag}<{t}>(p, a, b, c, o); }}"
            ),
            (Kern::Attention, _) => format!(
                "(P p, const {t}* q, const {t}* k, const {t}* v, const void* m, {t}* o) {{ k_attention_{tag}<{t}>(p, q, k, v, m, o); }}"
            ),
            (Kern::Copy, _) => format!("(P p, const {t}* x, {t}* o) {{ k_copy_ref<{t}>(p, x, o); }}"),
            (Kern::Gather(i), _) => {
                let it = ctype(i);
                format!(
                    "(P p, const {t}* x, const {it}* idx, {t}* o, int* err) {{ k_gather_ref<{t}, {it}>(p, x, idx, o, err); }}"
                )
            }
            (Kern::Equal, _) => {
                format!("(P p, const {t}* a, const {t}* b, u8* o) {{ k_equal_{tag}<{t}>(p, a, b, o); }}")
            }
            (Kern::Where, _) => {
                format!("(P p, const u8* c, const {t}* x, const {t}* y, {t}* o) {{ k_where_ref<{t}>(p, c, x, y, o); }}")
            }
            (Kern::Place, _) => format!("(P p, const {t}* x, {t}* o) {{ k_place_ref<{t}>(p, x, o); }}"),
            (Kern::KvWrite(i), _) => {
                let it = ctype(i);
                format!(
                    "(P p, const {t}* k, const {t}* v, const {it}* slots, {t}* kc, {t}* vc, int* err) {{ k_kv_write_ref<{t}, {it}>(p, k, v, slots, kc, vc, err); }}"
                )
            }
            (Kern::Paged, _) => format!(
                "(P p, const {t}* q, const {t}* kc, const {t}* vc, const int* bt, const int* lens, {t}* o, int* err) {{ k_paged_attention_ref<{t}>(p, q, kc, vc, bt, lens, o, err); }}"
            ),
            (Kern::RmsNorm, _) => format!(
                "(P p, const {t}* x, const {t}* r, const {t}* g, {t}* o, {t}* s) {{ k_rms_norm_{tag}<{t}>(p, x, r, g, o, s); }}"
            ),
            (Kern::SwiGlu, _) => {
                format!("(P p, const {t}* x, const {t}* u, {t}* o) {{ k_swiglu_{tag}<{t}>(p, x, u, o); }}")
            }
            (Kern::Rope(i), _) => {
                let it = ctype(i);
                format!(
                    "(P p, const {t}* x, const float* c, const float* s, const {it}* pos, {t}* o, int* err) {{ k_rope_ref<{t}, {it}>(p, x, c, s, pos, o, err); }}"
                )
            }
            (Kern::Cast(to), _) => {
                let ot = ctype(to);
                format!("(P p, const {t}* x, {ot}* o) {{ k_cast_ref<{t}, {ot}>(p, x, o); }}")
            }
        };
        s.push_str(&format!("extern \"C\" __global__ void {name}{body}\n"));
    }
    Some(s)
}

/// Shared definitions: parameter block, element conversions, reductions.
pub const PRELUDE: &str = r#"
typedef long long ll;
typedef unsigned long long ull;
typedef unsigned char u8;
struct P { ll n; ll rank; ll dims[8]; ll sa[8]; ll sb[8]; ll sc[8]; ll i[8]; double f[4]; };
struct h16 { unsigned short x; };
struct b16 { unsigned short x; };

#define NEG_INF_F (__uint_as_float(0xff800000u))
#define NEG_INF_D (__longlong_as_double((ll)0xfff0000000000000ull))
#define INF_F (__uint_as_float(0x7f800000u))
#define INF_D (__longlong_as_double((ll)0x7ff0000000000000ull))
#define NAN_F (__uint_as_float(0x7fc00000u))
#define NAN_D (__longlong_as_double((ll)0x7ff8000000000000ull))

__device__ __forceinline__ float h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float b2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ unsigned short f2b(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ int sat_i32(double v) {
    if (v != v) return 0;
    if (v <= -2147483648.0) return (-2147483647 - 1);
    if (v >= 2147483647.0) return 2147483647;
    return (int)v;
}
__device__ __forceinline__ ll sat_i64(double v) {
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return (ll)(-9223372036854775807LL - 1);
    if (v >= 9223372036854775807.0) return 9223372036854775807LL;
    return (ll)v;
}
__device__ __forceinline__ u8 sat_u8(double v) {
    if (v != v) return 0;
    if (v <= 0.0) return 0;
    if (v >= 255.0) return 255;
    return (u8)v;
}
// Integer narrowing keeps the low bits (two's complement), as ONNX Cast defines it.
__device__ __forceinline__ int wrap_i32(ll v) { return (int)(unsigned)(ull)v; }
__device__ __forceinline__ u8 wrap_u8(ll v) { return (u8)(ull)v; }
// double -> float rounded to odd (toward zero, then the last bit set when inexact): a
// second rounding to f16/bf16 is then correctly rounded, as one rounding from double.
__device__ __forceinline__ float d2f_odd(double v) {
    float f = __double2float_rz(v);
    if (f == f && (double)f != v) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

// Conversions of a storage type: f = to float, d = to double, l = to integer,
// of/od/ol = from float/double/integer (rounding to nearest even; float to integer
// truncates and saturates, NaN -> 0; integer to integer wraps).
template <class T> struct Cv;
template <> struct Cv<float> {
    static const bool is_int = false;
    static __device__ __forceinline__ float f(float v) { return v; }
    static __device__ __forceinline__ double d(float v) { return v; }
    static __device__ __forceinline__ ll l(float v) { return sat_i64(v); }
    static __device__ __forceinline__ float of(float v) { return v; }
    static __device__ __forceinline__ float od(double v) { return (float)v; }
    static __device__ __forceinline__ float ol(ll v) { return (float)v; }
};
template <> struct Cv<h16> {
    static const bool is_int = false;
    static __device__ __forceinline__ float f(h16 v) { return h2f(v.x); }
    static __device__ __forceinline__ double d(h16 v) { return (double)h2f(v.x); }
    static __device__ __forceinline__ ll l(h16 v) { return sat_i64(h2f(v.x)); }
    static __device__ __forceinline__ h16 of(float v) { h16 r; r.x = f2h(v); return r; }
    static __device__ __forceinline__ h16 od(double v) { h16 r; r.x = f2h(d2f_odd(v)); return r; }
    static __device__ __forceinline__ h16 ol(ll v) { return od((double)v); }
};
template <> struct Cv<b16> {
    static const bool is_int = false;
    static __device__ __forceinline__ float f(b16 v) { return b2f(v.x); }
    static __device__ __forceinline__ double d(b16 v) { return (double)b2f(v.x); }
    static __device__ __forceinline__ ll l(b16 v) { return sat_i64(b2f(v.x)); }
    static __device__ __forceinline__ b16 of(float v) { b16 r; r.x = f2b(v); return r; }
    static __device__ __forceinline__ b16 od(double v) { b16 r; r.x = f2b(d2f_odd(v)); return r; }
    static __device__ __forceinline__ b16 ol(ll v) { return od((double)v); }
};
template <> struct Cv<int> {
    static const bool is_int = true;
    static __device__ __forceinline__ float f(int v) { return (float)v; }
    static __device__ __forceinline__ double d(int v) { return (double)v; }
    static __device__ __forceinline__ ll l(int v) { return v; }
    static __device__ __forceinline__ int of(float v) { return sat_i32(v); }
    static __device__ __forceinline__ int od(double v) { return sat_i32(v); }
    static __device__ __forceinline__ int ol(ll v) { return wrap_i32(v); }
};
template <> struct Cv<ll> {
    static const bool is_int = true;
    static __device__ __forceinline__ float f(ll v) { return (float)v; }
    static __device__ __forceinline__ double d(ll v) { return (double)v; }
    static __device__ __forceinline__ ll l(ll v) { return v; }
    static __device__ __forceinline__ ll of(float v) { return sat_i64(v); }
    static __device__ __forceinline__ ll od(double v) { return sat_i64(v); }
    static __device__ __forceinline__ ll ol(ll v) { return v; }
};
template <> struct Cv<u8> {
    static const bool is_int = true;
    static __device__ __forceinline__ float f(u8 v) { return (float)v; }
    static __device__ __forceinline__ double d(u8 v) { return (double)v; }
    static __device__ __forceinline__ ll l(u8 v) { return v; }
    static __device__ __forceinline__ u8 of(float v) { return sat_u8(v); }
    static __device__ __forceinline__ u8 od(double v) { return sat_u8(v); }
    static __device__ __forceinline__ u8 ol(ll v) { return wrap_u8(v); }
};

__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_max(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ float m_max(float a, float b) { return fmaxf(a, b); }

// Element offset of output position `lin` through per-dimension strides `st`.
__device__ __forceinline__ ll offs(const P& p, const ll* st, ll lin) {
    ll o = 0;
    for (int d = (int)p.rank - 1; d >= 0; --d) {
        ll q = lin / p.dims[d];
        o += (lin - q * p.dims[d]) * st[d];
        lin = q;
    }
    return o;
}
__device__ __forceinline__ ll gtid() { return (ll)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ ll gstride() { return (ll)gridDim.x * blockDim.x; }

template <class F> __device__ __forceinline__ F unop(int op, F x, F factor) {
    switch (op) {
        case 0: return x < F(0) ? F(0) : x;  // NaN propagates
        case 1: return F(0.5) * x * (F(1) + m_erf(x * F(0.70710678118654752440)));
        case 2: {
            const F c = F(0.79788456080286535588);
            return F(0.5) * x * (F(1) + m_tanh(c * (x + F(0.044715) * x * x * x)));
        }
        case 3: return m_tanh(x);
        case 4: return m_erf(x);
        case 5: return m_exp(x);
        case 6: return m_sqrt(x);
        case 8: return -x;
        case 9: {  // from e^-|x|: neither end overflows, the left tail keeps its precision
            const F e = m_exp(x < F(0) ? x : -x);
            return x >= F(0) ? F(1) / (F(1) + e) : e / (F(1) + e);
        }
        case 10: {  // SiLU x * sigmoid(x), the sigmoid as case 9: silu(-inf) = -inf * 0 = NaN
            const F e = m_exp(x < F(0) ? x : -x);
            return x * (x >= F(0) ? F(1) / (F(1) + e) : e / (F(1) + e));
        }
        default: return x * factor;
    }
}
template <class F> __device__ __forceinline__ F binf(int op, F x, F y) {
    switch (op) {
        case 0: return x + y;
        case 1: return x - y;
        case 2: return x * y;
        case 4: return m_pow(x, y);  // C99 pow: pow(x, 0) = 1, pow(1, y) = 1 even for NaN
        default: return x / y;
    }
}
__device__ __forceinline__ ll bini(int op, ll x, ll y) {
    switch (op) {
        case 0: return (ll)((ull)x + (ull)y);
        case 1: return (ll)((ull)x - (ull)y);
        case 2: return (ll)((ull)x * (ull)y);
        default: return y == 0 ? 0 : (y == -1 ? (ll)(0ull - (ull)x) : x / y);
    }
}
// One element of a binary op in f32 (floats) or 64-bit integers.
template <class T> __device__ __forceinline__ T bin_elem(int op, T a, T b) {
    if (Cv<T>::is_int) return Cv<T>::ol(bini(op, Cv<T>::l(a), Cv<T>::l(b)));
    return Cv<T>::of(binf<float>(op, Cv<T>::f(a), Cv<T>::f(b)));
}
template <class T> __device__ __forceinline__ T bin_elem_ref(int op, T a, T b) {
    if (Cv<T>::is_int) return Cv<T>::ol(bini(op, Cv<T>::l(a), Cv<T>::l(b)));
    return Cv<T>::od(binf<double>(op, Cv<T>::d(a), Cv<T>::d(b)));
}

template <class F> __device__ __forceinline__ F warp_sum(F v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Block-wide reductions (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Sums in f32 or f64 (statistics that must not overflow f32).
template <class F> __device__ F block_sum(F v, F* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        F t = lane < nw ? sh[lane] : F(0);
        t = warp_sum(t);
        if (lane == 0) sh[0] = t;
    }
    __syncthreads();
    F r = sh[0];
    __syncthreads();
    return r;
}
__device__ float block_max(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? sh[lane] : NEG_INF_F;
        t = warp_max(t);
        if (lane == 0) sh[0] = t;
    }
    __syncthreads();
    float r = sh[0];
    __syncthreads();
    return r;
}

template <class T> struct alignas(4 * sizeof(T)) V4 { T v[4]; };
// RmsNorm's rows (p.i[1] wide, p.n of them): p.i[3] = AddRmsNorm (the sum x + r, rounded to
// T, is written to s and normalised), p.i[4] = a weight g, p.f[0] = eps. The sum of squares
// is in f64 on every tier; a row whose mean square is not finite (inf or NaN) is NaN.
__device__ __forceinline__ bool rms_bad(double ms) { return !(ms - ms == 0.0); }
// SwiGlu's gate and up of output element i: p.i[1] = N (the output's last axis), p.i[2] =
// two inputs (gate x, up u) rather than one x of rows [gate | up].
__device__ __forceinline__ ll swi_gate(const P& p, ll i) { return p.i[2] ? i : (i / p.i[1]) * 2 * p.i[1] + i % p.i[1]; }
// Element j of (x + residual) for (Add)LayerNorm: the sum is formed in f32 on every tier.
template <class T> __device__ __forceinline__ float ln_elem(const T* xr, const T* rr, bool res, ll j) {
    return res ? Cv<T>::f(xr[j]) + Cv<T>::f(rr[j]) : Cv<T>::f(xr[j]);
}
"#;

/// The templated kernels of every tier.
pub const KERNELS: &str = r#"
// ---------------- reference tier: one thread per output element, f64 arithmetic -------------

template <class T> __device__ void k_binary_ref(const P& p, const T* a, const T* b, T* o) {
    ll i = gtid();
    if (i >= p.n) return;
    o[i] = bin_elem_ref<T>((int)p.i[0], a[offs(p, p.sa, i)], b[offs(p, p.sb, i)]);
}
template <class T> __device__ void k_unary_ref(const P& p, const T* x, T* o) {
    ll i = gtid();
    if (i >= p.n) return;
    o[i] = Cv<T>::od(unop<double>((int)p.i[0], Cv<T>::d(x[i]), p.f[0]));
}
template <class T> __device__ void k_bias_gelu_ref(const P& p, const T* x, const T* b, T* o) {
    ll i = gtid();
    if (i >= p.n) return;
    // x + bias is formed in f32, as in the other tiers.
    o[i] = Cv<T>::od(unop<double>((int)p.i[0], (double)(Cv<T>::f(x[i]) + Cv<T>::f(b[i % p.i[2]])), 1.0));
}
template <class T> __device__ void k_softmax_ref(const P& p, const T* x, T* o) {
    ll t = gtid();
    if (t >= p.n) return;
    ll len = p.i[1], inner = p.i[2];
    ll base = (t / inner) * len * inner + t % inner;
    double m = NEG_INF_D;
    for (ll j = 0; j < len; ++j) m = fmax(m, Cv<T>::d(x[base + j * inner]));
    double s = 0.0;
    for (ll j = 0; j < len; ++j) s += exp(Cv<T>::d(x[base + j * inner]) - m);
    for (ll j = 0; j < len; ++j) o[base + j * inner] = Cv<T>::od(exp(Cv<T>::d(x[base + j * inner]) - m) / s);
}
template <class T> __device__ void k_layer_norm_ref(const P& p, const T* x, const T* r, const T* g, const T* b, T* o) {
    ll row = gtid();
    if (row >= p.n) return;
    ll d = p.i[1];
    bool res = p.i[3] != 0;
    const T* xr = x + row * d;
    const T* rr = r + (res ? row * d : 0);
    double mean = 0.0;
    for (ll j = 0; j < d; ++j) mean += (double)ln_elem<T>(xr, rr, res, j);
    mean /= (double)d;
    double var = 0.0;
    for (ll j = 0; j < d; ++j) {
        double v = (double)ln_elem<T>(xr, rr, res, j) - mean;
        var += v * v;
    }
    var /= (double)d;
    double inv = 1.0 / sqrt(var + p.f[0]);
    for (ll j = 0; j < d; ++j) {
        double v = (double)ln_elem<T>(xr, rr, res, j);
        o[row * d + j] = Cv<T>::od((v - mean) * inv * Cv<T>::d(g[j]) + Cv<T>::d(b[j]));
    }
}
template <class T> __device__ void k_rms_norm_ref(const P& p, const T* x, const T* r, const T* g, T* o, T* s) {
    ll row = gtid();
    if (row >= p.n) return;
    ll d = p.i[1];
    const T* xr = x + row * d;
    if (p.i[3]) {
        for (ll j = 0; j < d; ++j) s[row * d + j] = Cv<T>::od(Cv<T>::d(xr[j]) + Cv<T>::d(r[row * d + j]));
        xr = s + row * d;
    }
    double q = 0.0;
    for (ll j = 0; j < d; ++j) q += Cv<T>::d(xr[j]) * Cv<T>::d(xr[j]);
    double ms = q / (double)d, inv = 1.0 / sqrt(ms + p.f[0]);
    for (ll j = 0; j < d; ++j) {
        double w = p.i[4] ? Cv<T>::d(g[j]) : 1.0;
        o[row * d + j] = Cv<T>::od(rms_bad(ms) ? NAN_D : Cv<T>::d(xr[j]) * inv * w);
    }
}
template <class T> __device__ void k_swiglu_ref(const P& p, const T* x, const T* u, T* o) {
    ll i = gtid();
    if (i >= p.n) return;
    ll gi = swi_gate(p, i);
    double up = p.i[2] ? Cv<T>::d(u[i]) : Cv<T>::d(x[gi + p.i[1]]);
    o[i] = Cv<T>::od(unop<double>(10, Cv<T>::d(x[gi]), 1.0) * up);
}
// Offset of reduction step `r` over the reduced dims (sizes in sb, strides in sc).
__device__ __forceinline__ ll red_offs(const P& p, ll r) {
    ll o = 0;
    for (int d = (int)p.i[0] - 1; d >= 0; --d) {
        ll q = r / p.sb[d];
        o += (r - q * p.sb[d]) * p.sc[d];
        r = q;
    }
    return o;
}
template <class T> __device__ void k_reduce_ref(const P& p, const T* x, T* o) {
    ll t = gtid();
    if (t >= p.n) return;
    ll base = offs(p, p.sa, t), cnt = p.i[1];
    double s = 0.0;
    for (ll r = 0; r < cnt; ++r) s += Cv<T>::d(x[base + red_offs(p, r)]);
    o[t] = Cv<T>::od(p.i[2] ? s / (double)cnt : s);
}
// i = [M, N, K, a_m, a_k, b_k, b_n]; batch dims/strides in dims/sa/sb; c strides sc[0..1], sc[2] = has c.
template <class T> __device__ void k_matmul_ref(const P& p, const T* a, const T* b, const T* c, T* o) {
    ll t = gtid();
    if (t >= p.n) return;
    ll M = p.i[0], N = p.i[1], K = p.i[2];
    ll mn = M * N, bt = t / mn, rem = t - bt * mn, m = rem / N, n = rem - m * N;
    const T* ab = a + offs(p, p.sa, bt);
    const T* bb = b + offs(p, p.sb, bt);
    double acc = 0.0;
    for (ll k = 0; k < K; ++k) acc += Cv<T>::d(ab[m * p.i[3] + k * p.i[4]]) * Cv<T>::d(bb[k * p.i[5] + n * p.i[6]]);
    double v = p.f[0] * acc;
    // beta = 0 leaves c unread (ONNX's reference); alpha = 0 still multiplies.
    if (p.sc[2] && p.f[1] != 0.0) v += p.f[1] * Cv<T>::d(c[m * p.sc[0] + n * p.sc[1]]);
    o[t] = Cv<T>::od(v);
}
// i = [BH, S, T, D, Dv, mask mode, H]; mask strides over [B, H, S, T] in sc; f[0] = scale.
// Masks are additive: a u8 mask adds -inf where it is 0 (a masked NaN score stays NaN).
template <class T> __device__ __forceinline__ double att_mask(const P& p, const void* m, ll bh, ll i, ll j, double s) {
    if (p.i[5] == 0) return s;
    ll h = p.i[6];
    ll off = (bh / h) * p.sc[0] + (bh % h) * p.sc[1] + i * p.sc[2] + j * p.sc[3];
    if (p.i[5] == 1) return ((const u8*)m)[off] != 0 ? s : s + NEG_INF_D;
    return s + Cv<T>::d(((const T*)m)[off]);
}
// The kv head (batch · H_kv + kv head) that head `bh` (batch · H + head) reads: i[7] holds
// 2·G + causal, G query heads per kv head.
__device__ __forceinline__ ll att_kv(const P& p, ll bh) {
    ll h = p.i[6], g = p.i[7] >> 1;
    return (bh / h) * (h / g) + (bh % h) / g;
}
// How many keys query row `i` sees: all, or causal (bottom-right) those j <= i + T - S.
__device__ __forceinline__ ll att_keys(const P& p, ll i) {
    ll Tn = p.i[2];
    if (!(p.i[7] & 1)) return Tn;
    ll n = i + Tn - p.i[1] + 1;
    return n < 0 ? 0 : (n > Tn ? Tn : n);
}
// Rope, one output element per thread (f64 arithmetic, one rounding): the pair of feature
// f of row r (its token's position from `pos`, checked against the P table rows: outside,
// the error word is set and the element is 0).
template <class T, class I> __device__ void k_rope_ref(const P& p, const T* x, const float* cs, const float* sn, const I* pos, T* o, int* err) {
    ll t = gtid();
    if (t >= p.n) return;
    ll H = p.i[1], S = p.i[2], D = p.i[3], half = D / 2;
    ll f = t % D, r = t / D;
    ll tok = p.i[5] ? r / H : (r / (H * S)) * S + r % S;
    ll ps = (ll)pos[tok];
    if (ps < 0 || ps >= p.i[4]) {
        if (err) atomicCAS(err, 0, 1);
        o[t] = T();
        return;
    }
    bool first;
    ll i, a, b;
    if (p.i[6]) { i = f / 2; first = (f % 2) == 0; a = r * D + 2 * i; b = a + 1; }
    else { first = f < half; i = first ? f : f - half; a = r * D + i; b = a + half; }
    double c = (double)cs[ps * half + i], s = (double)sn[ps * half + i];
    double xa = Cv<T>::d(x[a]), xb = Cv<T>::d(x[b]);
    o[t] = Cv<T>::od(first ? xa * c - xb * s : xb * c + xa * s);
}
// A row with a NaN or +inf score is NaN; a row of only -inf scores (all keys masked) is 0.
template <class T> __device__ void k_attention_ref(const P& p, const T* q, const T* k, const T* v, const void* mk, T* o) {
    ll t = gtid();
    if (t >= p.n) return;
    ll S = p.i[1], Tn = p.i[2], D = p.i[3], Dv = p.i[4];
    ll c = t % Dv, rest = t / Dv, i = rest % S, bh = rest / S;
    ll kv = att_kv(p, bh), lim = att_keys(p, i);
    const T* qr = q + (bh * S + i) * D;
    double mx = NEG_INF_D;
    bool nan = false;
    for (ll j = 0; j < lim; ++j) {
        const T* kr = k + (kv * Tn + j) * D;
        double s = 0.0;
        for (ll d = 0; d < D; ++d) s += Cv<T>::d(qr[d]) * Cv<T>::d(kr[d]);
        s = att_mask<T>(p, mk, bh, i, j, s * p.f[0]);
        if (s != s) nan = true;
        else mx = fmax(mx, s);
    }
    if (nan || mx == INF_D) { o[t] = Cv<T>::od(NAN_D); return; }
    if (mx == NEG_INF_D) { o[t] = Cv<T>::od(0.0); return; }
    double sum = 0.0, acc = 0.0;
    for (ll j = 0; j < lim; ++j) {
        const T* kr = k + (kv * Tn + j) * D;
        double s = 0.0;
        for (ll d = 0; d < D; ++d) s += Cv<T>::d(qr[d]) * Cv<T>::d(kr[d]);
        s = att_mask<T>(p, mk, bh, i, j, s * p.f[0]);
        double e = exp(s - mx);
        sum += e;
        acc += e * Cv<T>::d(v[(kv * Tn + j) * Dv + c]);
    }
    o[t] = Cv<T>::od(acc / sum);
}
template <class T> __device__ void k_copy_ref(const P& p, const T* x, T* o) {
    ll i = gtid();
    if (i >= p.n) return;
    o[i] = x[offs(p, p.sa, i)];
}
// condition ? x : y, each read through its own (broadcast) strides.
template <class T> __device__ void k_where_ref(const P& p, const u8* c, const T* x, const T* y, T* o) {
    ll i = gtid();
    if (i >= p.n) return;
    o[i] = c[offs(p, p.sa, i)] ? x[offs(p, p.sb, i)] : y[offs(p, p.sc, i)];
}
// Element i of x (strides sa) to its place in o (strides sb).
template <class T> __device__ void k_place_ref(const P& p, const T* x, T* o) {
    ll i = gtid();
    if (i >= p.n) return;
    o[offs(p, p.sb, i)] = x[offs(p, p.sa, i)];
}
// i = [outer, axis len, count, inner]; an index out of range writes 0 and sets *err.
template <class T, class I> __device__ void k_gather_ref(const P& p, const T* x, const I* idx, T* o, int* err) {
    ll t = gtid();
    if (t >= p.n) return;
    ll len = p.i[1], cnt = p.i[2], inner = p.i[3];
    ll r = t % inner, rest = t / inner, c = rest % cnt, ou = rest / cnt;
    ll j = (ll)idx[c];
    if (j < 0) j += len;
    if (j < 0 || j >= len) {
        if (err) atomicCAS(err, 0, 1);
        o[t] = T();
        return;
    }
    o[t] = x[(ou * len + j) * inner + r];
}
// KvCacheWrite: i = [cache slots (NB * BS), row elements (KVH * D)]; one thread per
// element of the key and value rows. A negative slot is padding (skipped); a slot past
// the cache writes nothing and sets *err. The caches are updated in place.
template <class T, class I>
__device__ void k_kv_write_ref(const P& p, const T* k, const T* v, const I* slots, T* kc, T* vc, int* err) {
    ll t = gtid();
    if (t >= p.n) return;
    ll row = p.i[1], r = t % row;
    ll s = (ll)slots[t / row];
    if (s < 0) return;
    if (s >= p.i[0]) {
        if (err) atomicCAS(err, 0, 1);
        return;
    }
    kc[s * row + r] = k[t];
    vc[s * row + r] = v[t];
}
// PagedAttention: i = [H, D, BS, KVH, MB, NB], f[0] = scale; one thread per output
// element (sequence, head, column), f64 as the other reference kernels. Sequence b's
// position j lives at slot bt[b * MB + j / BS] * BS + j % BS. A length outside
// [0, MB * BS] or a block id outside [0, NB) writes 0 and sets *err; a zero length, or
// scores all -inf, give 0; a NaN or +inf score gives NaN.
template <class T>
__device__ void k_paged_attention_ref(const P& p, const T* q, const T* kc, const T* vc, const int* bt, const int* lens, T* o, int* err) {
    ll t = gtid();
    if (t >= p.n) return;
    ll H = p.i[0], D = p.i[1], BS = p.i[2], KVH = p.i[3], MB = p.i[4], NB = p.i[5];
    ll c = t % D, rest = t / D, h = rest % H, b = rest / H;
    ll kv = h / (H / KVH), len = (ll)lens[b];
    if (len < 0 || len > MB * BS) { if (err) atomicCAS(err, 0, 1); o[t] = Cv<T>::od(0.0); return; }
    for (ll j = 0; j < len; j += BS) {
        ll blk = (ll)bt[b * MB + j / BS];
        if (blk < 0 || blk >= NB) { if (err) atomicCAS(err, 0, 1); o[t] = Cv<T>::od(0.0); return; }
    }
    const T* qr = q + (b * H + h) * D;
    double mx = NEG_INF_D;
    bool nan = false;
    for (ll j = 0; j < len; ++j) {
        ll at = (((ll)bt[b * MB + j / BS] * BS + j % BS) * KVH + kv) * D;
        double s = 0.0;
        for (ll d = 0; d < D; ++d) s += Cv<T>::d(qr[d]) * Cv<T>::d(kc[at + d]);
        s *= p.f[0];
        if (s != s) nan = true;
        else mx = fmax(mx, s);
    }
    if (nan || mx == INF_D) { o[t] = Cv<T>::od(NAN_D); return; }
    if (mx == NEG_INF_D) { o[t] = Cv<T>::od(0.0); return; }
    double sum = 0.0, acc = 0.0;
    for (ll j = 0; j < len; ++j) {
        ll at = (((ll)bt[b * MB + j / BS] * BS + j % BS) * KVH + kv) * D;
        double s = 0.0;
        for (ll d = 0; d < D; ++d) s += Cv<T>::d(qr[d]) * Cv<T>::d(kc[at + d]);
        double e = exp(s * p.f[0] - mx);
        sum += e;
        acc += e * Cv<T>::d(vc[at + c]);
    }
    o[t] = Cv<T>::od(acc / sum);
}
template <class TI, class TO> __device__ __forceinline__ TO cast_elem(TI v) {
    // Integer sources go through `ol`: wrapping to integers, one rounding to f32.
    if (Cv<TI>::is_int) return Cv<TO>::ol(Cv<TI>::l(v));
    if (!Cv<TI>::is_int && !Cv<TO>::is_int) return Cv<TO>::of(Cv<TI>::f(v));
    return Cv<TO>::od(Cv<TI>::d(v));
}
// a == b as 1 or 0: integers exactly, floats in f64 (NaN equals nothing, -0 == 0).
template <class T> __device__ __forceinline__ u8 eq_elem(T a, T b) {
    if (Cv<T>::is_int) return Cv<T>::l(a) == Cv<T>::l(b) ? 1 : 0;
    return Cv<T>::d(a) == Cv<T>::d(b) ? 1 : 0;
}
template <class T> __device__ void k_equal_ref(const P& p, const T* a, const T* b, u8* o) {
    ll i = gtid();
    if (i >= p.n) return;
    o[i] = eq_elem<T>(a[offs(p, p.sa, i)], b[offs(p, p.sb, i)]);
}
template <class T> __device__ void k_equal_gen(const P& p, const T* a, const T* b, u8* o) {
    for (ll i = gtid(); i < p.n; i += gstride()) o[i] = eq_elem<T>(a[offs(p, p.sa, i)], b[offs(p, p.sb, i)]);
}
template <class TI, class TO> __device__ void k_cast_ref(const P& p, const TI* x, TO* o) {
    ll i = gtid();
    if (i >= p.n) return;
    o[i] = cast_elem<TI, TO>(x[i]);
}

// ---------------- generic tier: grid-stride loops, block reductions, tiled matmul; f32 ------

template <class T> __device__ void k_binary_gen(const P& p, const T* a, const T* b, T* o) {
    int op = (int)p.i[0];
    for (ll i = gtid(); i < p.n; i += gstride()) o[i] = bin_elem<T>(op, a[offs(p, p.sa, i)], b[offs(p, p.sb, i)]);
}
template <class T> __device__ void k_unary_gen(const P& p, const T* x, T* o) {
    int op = (int)p.i[0];
    float f = (float)p.f[0];
    for (ll i = gtid(); i < p.n; i += gstride()) o[i] = Cv<T>::of(unop<float>(op, Cv<T>::f(x[i]), f));
}
template <class T> __device__ void k_bias_gelu_gen(const P& p, const T* x, const T* b, T* o) {
    int op = (int)p.i[0];
    ll cols = p.i[2];
    for (ll i = gtid(); i < p.n; i += gstride())
        o[i] = Cv<T>::of(unop<float>(op, Cv<T>::f(x[i]) + Cv<T>::f(b[i % cols]), 1.f));
}
// One block per row (rows = outer * inner).
template <class T> __device__ void k_softmax_gen(const P& p, const T* x, T* o) {
    __shared__ float sh[32];
    ll len = p.i[1], inner = p.i[2];
    for (ll row = blockIdx.x; row < p.n; row += gridDim.x) {
        ll base = (row / inner) * len * inner + row % inner;
        float m = NEG_INF_F;
        for (ll j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, Cv<T>::f(x[base + j * inner]));
        m = block_max(m, sh);
        float s = 0.f;
        for (ll j = threadIdx.x; j < len; j += blockDim.x) s += expf(Cv<T>::f(x[base + j * inner]) - m);
        s = block_sum(s, sh);
        float inv = 1.f / s;
        for (ll j = threadIdx.x; j < len; j += blockDim.x)
            o[base + j * inner] = Cv<T>::of(expf(Cv<T>::f(x[base + j * inner]) - m) * inv);
    }
}
// Statistics in f64 (f32 values cannot overflow there), as on the CPU.
template <class T> __device__ void k_layer_norm_gen(const P& p, const T* x, const T* r, const T* g, const T* b, T* o) {
    __shared__ double sh[32];
    ll d = p.i[1];
    bool res = p.i[3] != 0;
    for (ll row = blockIdx.x; row < p.n; row += gridDim.x) {
        const T* xr = x + row * d;
        const T* rr = r + (res ? row * d : 0);
        double s = 0.0;
        for (ll j = threadIdx.x; j < d; j += blockDim.x) s += (double)ln_elem<T>(xr, rr, res, j);
        double mean = block_sum(s, sh) / (double)d;
        double q = 0.0;
        for (ll j = threadIdx.x; j < d; j += blockDim.x) {
            double v = (double)ln_elem<T>(xr, rr, res, j) - mean;
            q += v * v;
        }
        double inv = 1.0 / sqrt(block_sum(q, sh) / (double)d + p.f[0]);
        for (ll j = threadIdx.x; j < d; j += blockDim.x) {
            float nv = (float)(((double)ln_elem<T>(xr, rr, res, j) - mean) * inv);
            o[row * d + j] = Cv<T>::of(nv * Cv<T>::f(g[j]) + Cv<T>::f(b[j]));
        }
    }
}
// (Add)RmsNorm, one block per row: each thread reads back only the sums it wrote.
template <class T> __device__ void k_rms_norm_gen(const P& p, const T* x, const T* r, const T* g, T* o, T* s) {
    __shared__ double sh[32];
    ll d = p.i[1];
    for (ll row = blockIdx.x; row < p.n; row += gridDim.x) {
        const T* xr = x + row * d;
        if (p.i[3]) {
            for (ll j = threadIdx.x; j < d; j += blockDim.x)
                s[row * d + j] = Cv<T>::of(Cv<T>::f(xr[j]) + Cv<T>::f(r[row * d + j]));
            xr = s + row * d;
        }
        double q = 0.0;
        for (ll j = threadIdx.x; j < d; j += blockDim.x) q += (double)Cv<T>::f(xr[j]) * (double)Cv<T>::f(xr[j]);
        double ms = block_sum(q, sh) / (double)d, inv = 1.0 / sqrt(ms + p.f[0]);
        for (ll j = threadIdx.x; j < d; j += blockDim.x) {
            float nv = (float)((double)Cv<T>::f(xr[j]) * inv);
            o[row * d + j] = Cv<T>::of(rms_bad(ms) ? NAN_F : nv * (p.i[4] ? Cv<T>::f(g[j]) : 1.f));
        }
    }
}
template <class T> __device__ void k_swiglu_gen(const P& p, const T* x, const T* u, T* o) {
    for (ll i = gtid(); i < p.n; i += gstride()) {
        ll gi = swi_gate(p, i);
        float up = p.i[2] ? Cv<T>::f(u[i]) : Cv<T>::f(x[gi + p.i[1]]);
        o[i] = Cv<T>::of(unop<float>(10, Cv<T>::f(x[gi]), 1.f) * up);
    }
}
// One block per output element.
template <class T> __device__ void k_reduce_gen(const P& p, const T* x, T* o) {
    __shared__ double sh[32];
    ll cnt = p.i[1];
    for (ll t = blockIdx.x; t < p.n; t += gridDim.x) {
        ll base = offs(p, p.sa, t);
        // f64 accumulation, divided before rounding: [3e38, 3e38, -3e38] sums to 3e38.
        double s = 0.0;
        for (ll r = threadIdx.x; r < cnt; r += blockDim.x) s += Cv<T>::d(x[base + red_offs(p, r)]);
        s = block_sum(s, sh);
        if (threadIdx.x == 0) o[t] = Cv<T>::od(p.i[2] ? s / (double)cnt : s);
    }
}
// 16x16 shared-memory tiles; grid (ceil(N/16), ceil(M/16), batch), block (16, 16).
template <class T> __device__ void k_matmul_gen(const P& p, const T* a, const T* b, const T* c, T* o) {
    __shared__ float As[16][17];
    __shared__ float Bs[16][17];
    ll M = p.i[0], N = p.i[1], K = p.i[2];
    ll bt = blockIdx.z;
    const T* ab = a + offs(p, p.sa, bt);
    const T* bb = b + offs(p, p.sb, bt);
    int tx = threadIdx.x, ty = threadIdx.y;
    ll m = (ll)blockIdx.y * 16 + ty, n = (ll)blockIdx.x * 16 + tx;
    float acc = 0.f;
    for (ll k0 = 0; k0 < K; k0 += 16) {
        ll ka = k0 + tx, kb = k0 + ty;
        As[ty][tx] = (m < M && ka < K) ? Cv<T>::f(ab[m * p.i[3] + ka * p.i[4]]) : 0.f;
        Bs[ty][tx] = (kb < K && n < N) ? Cv<T>::f(bb[kb * p.i[5] + n * p.i[6]]) : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) acc = fmaf(As[ty][kk], Bs[kk][tx], acc);
        __syncthreads();
    }
    if (m < M && n < N) {
        float v = (float)p.f[0] * acc;
        if (p.sc[2] && p.f[1] != 0.0) v += (float)p.f[1] * Cv<T>::f(c[m * p.sc[0] + n * p.sc[1]]);
        o[bt * M * N + m * N + n] = Cv<T>::of(v);
    }
}

// ---------------- fast tier: contiguous vectorised element-wise, warp-per-row, fused attention --

// i[1] = 1 when every pointer is aligned to 4 elements (then 4-element vector accesses).
template <class T> __device__ void k_binary_fast(const P& p, const T* a, const T* b, T* o) {
    int op = (int)p.i[0];
    ll nv = p.i[1] ? p.n / 4 : 0, t = gtid(), st = gstride();
    for (ll k = t; k < nv; k += st) {
        V4<T> x = ((const V4<T>*)a)[k], y = ((const V4<T>*)b)[k], r;
#pragma unroll
        for (int j = 0; j < 4; ++j) r.v[j] = bin_elem<T>(op, x.v[j], y.v[j]);
        ((V4<T>*)o)[k] = r;
    }
    for (ll e = nv * 4 + t; e < p.n; e += st) o[e] = bin_elem<T>(op, a[e], b[e]);
}
template <class T> __device__ void k_unary_fast(const P& p, const T* x, T* o) {
    int op = (int)p.i[0];
    float f = (float)p.f[0];
    ll nv = p.i[1] ? p.n / 4 : 0, t = gtid(), st = gstride();
    for (ll k = t; k < nv; k += st) {
        V4<T> v = ((const V4<T>*)x)[k], r;
#pragma unroll
        for (int j = 0; j < 4; ++j) r.v[j] = Cv<T>::of(unop<float>(op, Cv<T>::f(v.v[j]), f));
        ((V4<T>*)o)[k] = r;
    }
    for (ll e = nv * 4 + t; e < p.n; e += st) o[e] = Cv<T>::of(unop<float>(op, Cv<T>::f(x[e]), f));
}
// Vector path when i[1] (aligned) and the bias length is a multiple of 4.
template <class T> __device__ void k_bias_gelu_fast(const P& p, const T* x, const T* b, T* o) {
    int op = (int)p.i[0];
    ll cols = p.i[2];
    ll nv = (p.i[1] && cols % 4 == 0) ? p.n / 4 : 0, t = gtid(), st = gstride();
    for (ll k = t; k < nv; k += st) {
        V4<T> v = ((const V4<T>*)x)[k], bv = ((const V4<T>*)b)[(k * 4 % cols) / 4], r;
#pragma unroll
        for (int j = 0; j < 4; ++j) r.v[j] = Cv<T>::of(unop<float>(op, Cv<T>::f(v.v[j]) + Cv<T>::f(bv.v[j]), 1.f));
        ((V4<T>*)o)[k] = r;
    }
    for (ll e = nv * 4 + t; e < p.n; e += st) o[e] = Cv<T>::of(unop<float>(op, Cv<T>::f(x[e]) + Cv<T>::f(b[e % cols]), 1.f));
}
// Last-axis softmax, one warp per row.
template <class T> __device__ void k_softmax_fast(const P& p, const T* x, T* o) {
    ll len = p.i[1];
    int lane = threadIdx.x & 31;
    ll warps = ((ll)gridDim.x * blockDim.x) >> 5;
    for (ll row = gtid() >> 5; row < p.n; row += warps) {
        const T* xr = x + row * len;
        float m = NEG_INF_F;
        for (ll j = lane; j < len; j += 32) m = fmaxf(m, Cv<T>::f(xr[j]));
        m = warp_max(m);
        float s = 0.f;
        for (ll j = lane; j < len; j += 32) s += expf(Cv<T>::f(xr[j]) - m);
        float inv = 1.f / warp_sum(s);
        for (ll j = lane; j < len; j += 32) o[row * len + j] = Cv<T>::of(expf(Cv<T>::f(xr[j]) - m) * inv);
    }
}
// (Add+)LayerNorm, one warp per row.
template <class T> __device__ void k_layer_norm_fast(const P& p, const T* x, const T* r, const T* g, const T* b, T* o) {
    ll d = p.i[1];
    bool res = p.i[3] != 0;
    int lane = threadIdx.x & 31;
    ll warps = ((ll)gridDim.x * blockDim.x) >> 5;
    for (ll row = gtid() >> 5; row < p.n; row += warps) {
        const T* xr = x + row * d;
        const T* rr = r + (res ? row * d : 0);
        // Statistics in f64, as on the CPU: rows of huge values stay finite.
        double s = 0.0;
        for (ll j = lane; j < d; j += 32) s += (double)ln_elem<T>(xr, rr, res, j);
        double mean = warp_sum(s) / (double)d;
        double q = 0.0;
        for (ll j = lane; j < d; j += 32) {
            double v = (double)ln_elem<T>(xr, rr, res, j) - mean;
            q += v * v;
        }
        double inv = 1.0 / sqrt(warp_sum(q) / (double)d + p.f[0]);
        for (ll j = lane; j < d; j += 32) {
            float nv = (float)(((double)ln_elem<T>(xr, rr, res, j) - mean) * inv);
            o[row * d + j] = Cv<T>::of(nv * Cv<T>::f(g[j]) + Cv<T>::f(b[j]));
        }
    }
}
// (Add)RmsNorm, one warp per row (the decode-time shape: many short rows).
template <class T> __device__ void k_rms_norm_fast(const P& p, const T* x, const T* r, const T* g, T* o, T* s) {
    ll d = p.i[1];
    int lane = threadIdx.x & 31;
    ll warps = ((ll)gridDim.x * blockDim.x) >> 5;
    for (ll row = gtid() >> 5; row < p.n; row += warps) {
        const T* xr = x + row * d;
        if (p.i[3]) {
            for (ll j = lane; j < d; j += 32) s[row * d + j] = Cv<T>::of(Cv<T>::f(xr[j]) + Cv<T>::f(r[row * d + j]));
            xr = s + row * d;
        }
        double q = 0.0;
        for (ll j = lane; j < d; j += 32) q += (double)Cv<T>::f(xr[j]) * (double)Cv<T>::f(xr[j]);
        double ms = warp_sum(q) / (double)d;
        float inv = (float)(1.0 / sqrt(ms + p.f[0]));
        // The scale as f32 where that keeps it normal; else the product in f64, as the CPU.
        bool wide = !(inv >= 1e-30f && inv <= 1e30f);
        for (ll j = lane; j < d; j += 32) {
            float v = Cv<T>::f(xr[j]);
            float nv = wide ? (float)((double)v / sqrt(ms + p.f[0])) : v * inv;
            o[row * d + j] = Cv<T>::of(rms_bad(ms) ? NAN_F : nv * (p.i[4] ? Cv<T>::f(g[j]) : 1.f));
        }
    }
}
template <class T> __device__ void k_swiglu_fast(const P& p, const T* x, const T* u, T* o) {
    for (ll i = gtid(); i < p.n; i += gstride()) {
        ll gi = swi_gate(p, i);
        float a = Cv<T>::f(x[gi]);
        float up = p.i[2] ? Cv<T>::f(u[i]) : Cv<T>::f(x[gi + p.i[1]]);
        o[i] = Cv<T>::of(a / (1.f + expf(-a)) * up);
    }
}
// Fused attention: one block per query row; q row and the T scores live in dynamic
// shared memory ((D + T) floats).
template <class T> __device__ void k_attention_fast(const P& p, const T* q, const T* k, const T* v, const void* mk, T* o) {
    extern __shared__ float smem[];
    __shared__ float sh[32];
    ll S = p.i[1], Tn = p.i[2], D = p.i[3], Dv = p.i[4];
    float* qs = smem;
    float* sc = smem + D;
    for (ll row = blockIdx.x; row < p.i[0] * S; row += gridDim.x) {
        ll bh = row / S, i = row % S;
        // The kv head it reads and the keys it sees: the others are never read.
        ll kv = att_kv(p, bh), lim = att_keys(p, i);
        for (ll d = threadIdx.x; d < D; d += blockDim.x) qs[d] = Cv<T>::f(q[row * D + d]);
        __syncthreads();
        float mx = NEG_INF_F, nan = 0.f;
        for (ll j = threadIdx.x; j < lim; j += blockDim.x) {
            const T* kr = k + (kv * Tn + j) * D;
            float s = 0.f;
            for (ll d = 0; d < D; ++d) s = fmaf(qs[d], Cv<T>::f(kr[d]), s);
            float sv = (float)att_mask<T>(p, mk, bh, i, j, (double)(s * (float)p.f[0]));
            sc[j] = sv;
            if (sv != sv) nan = 1.f;
            mx = fmaxf(mx, sv);
        }
        mx = block_max(mx, sh);
        nan = block_max(nan, sh);
        // NaN or +inf in the row: NaN; every key masked (max -inf): 0; as the other tiers.
        bool bad = nan > 0.f || mx == INF_F, masked = !bad && mx == NEG_INF_F;
        float sum = 0.f;
        if (!bad && !masked) {
            for (ll j = threadIdx.x; j < lim; j += blockDim.x) {
                float e = expf(sc[j] - mx);
                sc[j] = e;
                sum += e;
            }
        }
        sum = block_sum(sum, sh);
        for (ll c = threadIdx.x; c < Dv; c += blockDim.x) {
            float acc = 0.f;
            if (!bad && !masked)
                for (ll j = 0; j < lim; ++j) acc = fmaf(sc[j], Cv<T>::f(v[(kv * Tn + j) * Dv + c]), acc);
            o[row * Dv + c] = Cv<T>::of(bad ? NAN_F : (masked ? 0.f : acc / sum));
        }
        __syncthreads();
    }
}
"#;
