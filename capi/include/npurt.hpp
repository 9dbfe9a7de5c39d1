// npurt.hpp: header-only C++17 wrapper of npurt.h: RAII handles (move-only, freed by
// their destructors) and exceptions (npurt::Error, carrying the status and the message).
// Element types: float, int32_t, int64_t, uint8_t, npurt::f16 and npurt::bf16.
//
//     npurt::Runtime rt("backend=cpu");
//     auto a = rt.tensor({2, 2}, {1, 2, 3, 4});  // float unless the data says otherwise
//     auto c = std::move(rt.execute("MatMul", {&a, &a})[0]);
//     std::vector<float> v = c.to_host<float>();  // {7, 10, 15, 22}
#ifndef NPURT_HPP
#define NPURT_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "npurt.h"

namespace npurt {

/// A failed call: its status (NPURT_ERR_*) and the message npurt_last_error() gave.
class Error : public std::runtime_error {
  public:
    Error(npurt_status status, const std::string &message)
        : std::runtime_error(std::string(npurt_status_name(status)) + ": " + message), status_(status) {}
    npurt_status status() const noexcept { return status_; }

  private:
    npurt_status status_;
};

/// Throws npurt::Error when `s` is not NPURT_OK.
inline void check(npurt_status s) {
    if (s != NPURT_OK) throw Error(s, npurt_last_error());
}

/// An IEEE 754 half-precision element (NPURT_F16): its 16 bits. C++17 has no half type;
/// from_float rounds to nearest even, to_float is exact.
struct f16 {
    uint16_t bits = 0;

    static f16 from_bits(uint16_t b) noexcept {
        f16 h;
        h.bits = b;
        return h;
    }
    static f16 from_float(float x) noexcept {
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        const uint32_t sign = (u >> 16) & 0x8000u;
        const uint32_t mag = u & 0x7fffffffu;
        if (mag >= 0x7f800000u) // inf, or NaN (kept quiet)
            return from_bits(static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u)));
        if (mag >= 0x477ff000u) // rounds past the largest half (65504)
            return from_bits(static_cast<uint16_t>(sign | 0x7c00u));
        if (mag < 0x38800000u) { // below the smallest normal half: subnormal or zero
            if (mag < 0x33000000u) return from_bits(static_cast<uint16_t>(sign));
            const uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
            const uint32_t shift = 126u - e; // 14..24
            uint32_t h = m >> shift;
            const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
            if (rest > half || (rest == half && (h & 1u))) h++;
            return from_bits(static_cast<uint16_t>(sign | h));
        }
        uint32_t h = ((mag >> 13) - (112u << 10));
        const uint32_t rest = mag & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
        return from_bits(static_cast<uint16_t>(sign | h));
    }
    float to_float() const noexcept {
        const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
        const uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
        uint32_t u;
        if (e == 0x1fu) {
            u = sign | 0x7f800000u | (m << 13);
        } else if (e != 0) {
            u = sign | ((e + 112u) << 23) | (m << 13);
        } else if (m == 0) {
            u = sign;
        } else { // subnormal: m x 2^-24, exact in float
            float f = static_cast<float>(m) * (1.0f / 16777216.0f);
            return sign ? -f : f;
        }
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
    friend bool operator==(f16 a, f16 b) noexcept { return a.bits == b.bits; }
    friend bool operator!=(f16 a, f16 b) noexcept { return a.bits != b.bits; }
};

/// A bfloat16 element (NPURT_BF16): the upper 16 bits of a float. from_float rounds to
/// nearest even, to_float is exact.
struct bf16 {
    uint16_t bits = 0;

    static bf16 from_bits(uint16_t b) noexcept {
        bf16 h;
        h.bits = b;
        return h;
    }
    static bf16 from_float(float x) noexcept {
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) return from_bits(static_cast<uint16_t>((u >> 16) | 0x40u)); // NaN
        u += 0x7fffu + ((u >> 16) & 1u);
        return from_bits(static_cast<uint16_t>(u >> 16));
    }
    float to_float() const noexcept {
        const uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
    friend bool operator==(bf16 a, bf16 b) noexcept { return a.bits == b.bits; }
    friend bool operator!=(bf16 a, bf16 b) noexcept { return a.bits != b.bits; }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "npurt::f16 and npurt::bf16 are 16-bit elements");

namespace detail {
/// A move-only owner of one handle, freed with `Free` (whose status is ignored: a handle
/// this class owns is live).
template <typename T, npurt_status (*Free)(T *)> class Handle {
  public:
    Handle() noexcept = default;
    explicit Handle(T *p) noexcept : p_(p) {}
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    Handle(Handle &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Handle &operator=(Handle &&o) noexcept {
        if (this != &o) {
            (void)Free(p_);
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    ~Handle() { (void)Free(p_); }
    T *get() const noexcept { return p_; }
    /// Gives up ownership.
    T *release() noexcept { return std::exchange(p_, nullptr); }
    explicit operator bool() const noexcept { return p_ != nullptr; }

  protected:
    T *p_ = nullptr;
};

template <typename E> constexpr npurt_dtype dtype_of();
template <> constexpr npurt_dtype dtype_of<float>() { return NPURT_F32; }
template <> constexpr npurt_dtype dtype_of<f16>() { return NPURT_F16; }
template <> constexpr npurt_dtype dtype_of<bf16>() { return NPURT_BF16; }
template <> constexpr npurt_dtype dtype_of<int32_t>() { return NPURT_I32; }
template <> constexpr npurt_dtype dtype_of<int64_t>() { return NPURT_I64; }
template <> constexpr npurt_dtype dtype_of<uint8_t>() { return NPURT_U8; }
} // namespace detail

/// A tensor (npurt_tensor).
class Tensor : public detail::Handle<npurt_tensor, npurt_tensor_free> {
  public:
    using Handle::Handle;
    npurt_dtype dtype() const {
        npurt_dtype d;
        check(npurt_tensor_info(p_, &d, nullptr, 0, nullptr, nullptr));
        return d;
    }
    std::vector<int64_t> shape() const {
        size_t rank = 0;
        check(npurt_tensor_info(p_, nullptr, nullptr, 0, &rank, nullptr));
        std::vector<int64_t> s(rank);
        check(npurt_tensor_info(p_, nullptr, s.data(), s.size(), &rank, nullptr));
        return s;
    }
    size_t numel() const {
        size_t n = 1;
        for (int64_t d : shape()) n *= static_cast<size_t>(d);
        return n;
    }
    /// Waits for queued work on the tensor and copies it out (E must be its element type).
    template <typename E> std::vector<E> to_host() const {
        if (dtype() != detail::dtype_of<E>()) throw Error(NPURT_ERR_INVALID_ARGUMENT, "to_host: wrong element type");
        std::vector<E> v(numel());
        check(npurt_tensor_to_host(p_, v.data(), v.size() * sizeof(E)));
        return v;
    }
};

/// A user stream (npurt_stream).
class Stream : public detail::Handle<npurt_stream, npurt_stream_free> {
  public:
    using Handle::Handle;
    void synchronize() { check(npurt_stream_synchronize(p_)); }
};

/// An event (npurt_event).
class Event : public detail::Handle<npurt_event, npurt_event_free> {
  public:
    using Handle::Handle;
    void record(Stream &s) { check(npurt_event_record(p_, s.get())); }
    void synchronize() { check(npurt_event_synchronize(p_)); }
    bool done() const {
        int32_t d = 0;
        check(npurt_event_query(p_, &d));
        return d != 0;
    }
    /// Milliseconds from `start` to this event.
    float elapsed_ms_since(const Event &start) const {
        float ms = 0;
        check(npurt_event_elapsed_ms(start.get(), p_, &ms));
        return ms;
    }
};

/// A compiled graph (npurt_graph).
class Graph : public detail::Handle<npurt_graph, npurt_graph_free> {
  public:
    using Handle::Handle;
    size_t input_count() const {
        size_t n = 0;
        check(npurt_graph_input_count(p_, &n));
        return n;
    }
    /// Runs the graph; returns its outputs (the graph's output count is `n_outputs`).
    std::vector<Tensor> run(const std::vector<const Tensor *> &inputs, size_t n_outputs = 1) {
        std::vector<const npurt_tensor *> in;
        for (const Tensor *t : inputs) in.push_back(t->get());
        std::vector<npurt_tensor *> out(n_outputs, nullptr);
        check(npurt_graph_run(p_, in.data(), in.size(), out.data(), out.size()));
        std::vector<Tensor> r;
        for (npurt_tensor *t : out) r.emplace_back(t);
        return r;
    }
};

/// A sentence embedder (npurt_embedder).
class Embedder : public detail::Handle<npurt_embedder, npurt_embedder_free> {
  public:
    using Handle::Handle;
    /// One L2-normalised row per text.
    std::vector<std::vector<float>> embed(const std::vector<std::string> &texts) {
        std::vector<const char *> c;
        for (const std::string &t : texts) c.push_back(t.c_str());
        size_t dim = 0;
        check(npurt_embed(p_, c.data(), c.size(), nullptr, 0, &dim));
        std::vector<float> flat(c.size() * dim);
        if (!flat.empty()) check(npurt_embed(p_, c.data(), c.size(), flat.data(), flat.size(), &dim));
        std::vector<std::vector<float>> rows;
        for (size_t i = 0; i < c.size(); i++) rows.emplace_back(flat.begin() + i * dim, flat.begin() + (i + 1) * dim);
        return rows;
    }
};

/// A runtime (npurt_runtime); `options` as npurt_runtime_new takes them.
class Runtime : public detail::Handle<npurt_runtime, npurt_runtime_free> {
  public:
    Runtime() : Runtime(nullptr) {}
    explicit Runtime(const char *options) {
        npurt_runtime *p = nullptr;
        check(npurt_runtime_new(options, &p));
        p_ = p;
    }
    explicit Runtime(const std::string &options) : Runtime(options.c_str()) {}

    int32_t device_count() const {
        int32_t n = 0;
        check(npurt_device_count(p_, &n));
        return n;
    }
    /// The backend, devices and units as JSON.
    std::string info() const {
        size_t needed = 0;
        check(npurt_runtime_info(p_, nullptr, 0, &needed));
        std::string s(needed, '\0');
        check(npurt_runtime_info(p_, &s[0], s.size(), &needed));
        s.resize(needed - 1);
        return s;
    }
    npurt_memory_info memory_info(int32_t device = 0) const {
        npurt_memory_info m;
        check(npurt_get_memory_info(p_, device, &m));
        return m;
    }
    void synchronize(int32_t device = 0) { check(npurt_synchronize(p_, device)); }
    void release_cached(int32_t device = 0) { check(npurt_release_cached(p_, device)); }

    /// An uninitialised tensor.
    Tensor empty(npurt_dtype dtype, const std::vector<int64_t> &shape, int32_t device = 0) {
        npurt_tensor *t = nullptr;
        check(npurt_tensor_new(p_, dtype, shape.data(), shape.size(), device, &t));
        return Tensor(t);
    }
    /// A tensor holding a copy of `data` (its length must fill `shape`). The element type
    /// is the data's; a braced list (`rt.tensor({2, 2}, {1, 2, 3, 4})`) makes a float tensor.
    template <typename E = float>
    Tensor tensor(const std::vector<int64_t> &shape, const std::vector<E> &data, int32_t device = 0) {
        npurt_tensor *t = nullptr;
        check(npurt_tensor_from_host(p_, detail::dtype_of<E>(), shape.data(), shape.size(), data.data(),
                                     data.size() * sizeof(E), device, &t));
        return Tensor(t);
    }
    Stream stream(int32_t device = 0) {
        npurt_stream *s = nullptr;
        check(npurt_stream_new(p_, device, &s));
        return Stream(s);
    }
    Event event(int32_t device = 0) {
        npurt_event *e = nullptr;
        check(npurt_event_new(p_, device, &e));
        return Event(e);
    }
    /// Runs `op` with new outputs (`n_outputs` of them); `stream` nullptr = synchronous.
    std::vector<Tensor> execute(const char *op, const std::vector<const Tensor *> &inputs, const char *attrs = nullptr,
                                Stream *stream = nullptr, npurt_report *report = nullptr, size_t n_outputs = 1) {
        std::vector<const npurt_tensor *> in;
        for (const Tensor *t : inputs) in.push_back(t->get());
        std::vector<npurt_tensor *> out(n_outputs, nullptr);
        check(npurt_execute(p_, op, attrs, in.data(), in.size(), out.data(), out.size(),
                            stream ? stream->get() : nullptr, report));
        std::vector<Tensor> r;
        for (npurt_tensor *t : out) r.emplace_back(t);
        return r;
    }
    /// Runs `op` writing into existing outputs.
    void execute_into(const char *op, const std::vector<const Tensor *> &inputs, std::vector<Tensor *> outputs,
                      const char *attrs = nullptr, Stream *stream = nullptr) {
        std::vector<const npurt_tensor *> in;
        for (const Tensor *t : inputs) in.push_back(t->get());
        std::vector<npurt_tensor *> out;
        for (Tensor *t : outputs) out.push_back(t->get());
        check(npurt_execute(p_, op, attrs, in.data(), in.size(), out.data(), out.size(),
                            stream ? stream->get() : nullptr, nullptr));
    }
    Graph bert(const std::string &model_dir_or_preset, size_t batch, size_t seq, const char *options = nullptr) {
        npurt_graph *g = nullptr;
        check(npurt_graph_from_bert(p_, model_dir_or_preset.c_str(), batch, seq, options, &g));
        return Graph(g);
    }
    Embedder embedder(const std::string &model_dir) {
        npurt_embedder *e = nullptr;
        check(npurt_embedder_new(p_, model_dir.c_str(), &e));
        return Embedder(e);
    }
};

/// The library's version string.
inline std::string version() { return npurt_version(); }

} // namespace npurt

#endif // NPURT_HPP
