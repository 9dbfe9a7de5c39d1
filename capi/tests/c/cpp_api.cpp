// npurt.hpp: RAII handles and exceptions carrying the status and the message.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "npurt.hpp"

#define REQUIRE(cond)                                                                     \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);        \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

int main() {
    npurt::Runtime rt("backend=cpu;threads=2;max_streams=8");
    REQUIRE(rt.device_count() == 1);
    REQUIRE(rt.info().find("\"backend\":\"cpu\"") != std::string::npos);
    std::printf("npurt %s\n", npurt::version().c_str());

    auto a = rt.tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
    auto b = rt.tensor<float>({3, 2}, {1, 0, 0, 1, 1, 1});
    npurt_report report;
    auto c = std::move(rt.execute("MatMul", {&a, &b}, nullptr, nullptr, &report)[0]);
    REQUIRE(c.shape() == (std::vector<int64_t>{2, 2}));
    std::vector<float> want = {4, 5, 10, 11};
    REQUIRE(c.to_host<float>() == want);
    std::printf("MatMul via %s\n", report.implementation);

    // Asynchronous: a stream, events around the op, the output written in place.
    auto s = rt.stream();
    auto start = rt.event(), end = rt.event();
    auto d = rt.empty(NPURT_F32, {2, 2});
    start.record(s);
    rt.execute_into("Add", {&c, &c}, {&d}, nullptr, &s);
    end.record(s);
    end.synchronize();
    REQUIRE(end.done());
    REQUIRE(end.elapsed_ms_since(start) >= 0.0f);
    s.synchronize();
    REQUIRE(d.to_host<float>() == (std::vector<float>{8, 10, 20, 22}));

    // Softmax with an attribute.
    auto e = std::move(rt.execute("Softmax", {&d}, "axis=-1")[0]);
    auto ev = e.to_host<float>();
    REQUIRE(std::fabs(ev[0] + ev[1] - 1.0f) < 1e-6f && ev[1] > ev[0]);

    // Errors are exceptions with the status and the message.
    bool threw = false;
    try {
        rt.execute("MatMul", {&a, &a});
    } catch (const npurt::Error &err) {
        threw = true;
        REQUIRE(err.status() == NPURT_ERR_VALIDATION);
        REQUIRE(std::strstr(err.what(), "NPURT_ERR_VALIDATION: MatMul") != nullptr);
    }
    REQUIRE(threw);
    threw = false;
    try {
        npurt::Runtime bad("backend=cpu;colour=blue");
    } catch (const npurt::Error &err) {
        threw = err.status() == NPURT_ERR_INVALID_ARGUMENT;
    }
    REQUIRE(threw);

    // A compiled graph from the tiny preset.
    auto g = rt.bert("tiny", 1, 3);
    REQUIRE(g.input_count() == 3);
    auto ids = rt.tensor<int64_t>({1, 3}, {1, 2, 3});
    auto types = rt.tensor<int64_t>({1, 3}, {0, 0, 0});
    auto mask = rt.tensor<float>({1, 3}, {1, 1, 1});
    auto hidden = std::move(g.run({&ids, &types, &mask})[0]);
    REQUIRE(hidden.shape() == (std::vector<int64_t>{1, 3, 32}));

    // A braced list of numbers makes a float tensor.
    auto f = rt.tensor({2, 2}, {1, 2, 3, 4});
    REQUIRE(f.dtype() == NPURT_F32);
    REQUIRE(f.to_host<float>() == (std::vector<float>{1, 2, 3, 4}));

    // Half-precision elements: npurt::f16 and npurt::bf16, converted by Cast.
    const std::vector<float> hv = {1.5f, -2.0f, 65504.0f, 0.000061035156f, 5.9604645e-8f, 0.0f};
    std::vector<npurt::f16> h;
    for (float v : hv) h.push_back(npurt::f16::from_float(v));
    REQUIRE(npurt::f16::from_float(1.0f).bits == 0x3c00 && npurt::f16::from_float(-2.0f).bits == 0xc000);
    REQUIRE(npurt::f16::from_float(1e6f).bits == 0x7c00);       // past the largest half: infinity
    REQUIRE(npurt::f16::from_float(1.0f + 1.0f / 2048).bits == 0x3c00); // ties round to even
    REQUIRE(npurt::f16::from_float(1.0f + 3.0f / 2048).bits == 0x3c02);
    auto th = rt.tensor<npurt::f16>({2, 3}, h);
    REQUIRE(th.dtype() == NPURT_F16);
    auto hf = std::move(rt.execute("Cast", {&th}, "to=f32")[0]);
    REQUIRE(hf.to_host<float>() == hv);
    auto back = std::move(rt.execute("Cast", {&hf}, "to=f16")[0]);
    REQUIRE(back.to_host<npurt::f16>() == h);
    for (size_t i = 0; i < h.size(); i++) REQUIRE(h[i].to_float() == hv[i]);
    const std::vector<float> bv = {1.0f, -0.5f, 3.0e38f, 1.0e-30f};
    std::vector<npurt::bf16> b16;
    for (float v : bv) b16.push_back(npurt::bf16::from_float(v));
    REQUIRE(npurt::bf16::from_float(1.0f).bits == 0x3f80);
    auto tb16 = rt.tensor<npurt::bf16>({4}, b16);
    REQUIRE(tb16.dtype() == NPURT_BF16);
    auto bf = std::move(rt.execute("Cast", {&tb16}, "to=f32")[0]);
    std::vector<float> bfv = bf.to_host<float>();
    for (size_t i = 0; i < bv.size(); i++) {
        REQUIRE(bfv[i] == b16[i].to_float());
        REQUIRE(std::fabs(bfv[i] - bv[i]) <= std::fabs(bv[i]) / 256);
    }

    // Handles move; the moved-from one frees nothing.
    npurt::Tensor moved = std::move(a);
    REQUIRE(!a && moved);
    npurt_memory_info m = rt.memory_info();
    REQUIRE(m.in_use_bytes > 0);
    std::printf("OK cpp_api\n");
    return 0;
}
