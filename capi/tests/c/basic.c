/* MatMul, Add and Softmax through the C API, checked against values computed here.
 * Usage: basic [OPTIONS] (runtime options; default "backend=cpu;threads=2").
 * This is the example of docs/C_API.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npurt.h"

#define CHECK(call)                                                                       \
    do {                                                                                  \
        npurt_status s_ = (call);                                                         \
        if (s_ != NPURT_OK) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,             \
                    npurt_status_name(s_), npurt_last_error());                           \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static int close_to(const float *got, const float *want, size_t n, float tol, const char *what) {
    for (size_t i = 0; i < n; i++) {
        if (fabsf(got[i] - want[i]) > tol * (1.0f + fabsf(want[i]))) {
            fprintf(stderr, "%s[%zu] = %g, expected %g\n", what, i, got[i], want[i]);
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *options = argc > 1 ? argv[1] : "backend=cpu;threads=2";
    enum { M = 3, K = 4, N = 5 };
    float a[M * K], b[K * N], bias[N], want[M * N], got[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)(i % 7) * 0.25f - 0.5f;
    for (int i = 0; i < K * N; i++) b[i] = (float)(i % 5) * 0.125f + 0.1f;
    for (int j = 0; j < N; j++) bias[j] = (float)j - 2.0f;

    npurt_runtime *rt = NULL;
    CHECK(npurt_runtime_new(options, &rt));
    printf("npurt %s\n", npurt_version());

    size_t needed = 0;
    CHECK(npurt_runtime_info(rt, NULL, 0, &needed));
    char *info = malloc(needed);
    CHECK(npurt_runtime_info(rt, info, needed, &needed));
    printf("info %s\n", info);
    free(info);
    int32_t devices = 0;
    CHECK(npurt_device_count(rt, &devices));
    printf("devices %d\n", devices);

    const int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbias[1] = {N};
    npurt_tensor *ta = NULL, *tb = NULL, *tbias = NULL;
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, sa, 2, a, sizeof a, 0, &ta));
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, sb, 2, b, sizeof b, 0, &tb));
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, sbias, 1, bias, sizeof bias, 0, &tbias));

    /* C = A x B: the output is made by npurt (outputs[0] == NULL). */
    const npurt_tensor *mm_in[2] = {ta, tb};
    npurt_tensor *c = NULL;
    npurt_report report;
    CHECK(npurt_execute(rt, "MatMul", NULL, mm_in, 2, &c, 1, NULL, &report));
    printf("MatMul via %s on %s (class %d, tier %d, device %d), %.3f ms, %llu flops\n",
           report.implementation, report.unit, report.unit_class, report.tier, report.device,
           report.elapsed_ms, (unsigned long long)report.flops);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
            want[i * N + j] = (float)s;
        }
    CHECK(npurt_tensor_to_host(c, got, sizeof got));
    if (!close_to(got, want, M * N, 1e-5f, "MatMul")) return 1;
    if (report.flops != 2ull * M * N * K) {
        fprintf(stderr, "MatMul flops %llu\n", (unsigned long long)report.flops);
        return 1;
    }

    /* D = C + bias (broadcast), written into an existing tensor. */
    const int64_t sc[2] = {M, N};
    npurt_tensor *d = NULL;
    CHECK(npurt_tensor_new(rt, NPURT_F32, sc, 2, 0, &d));
    const npurt_tensor *add_in[2] = {c, tbias};
    CHECK(npurt_execute(rt, "Add", NULL, add_in, 2, &d, 1, NULL, NULL));
    for (int i = 0; i < M * N; i++) want[i] += bias[i % N];
    CHECK(npurt_tensor_to_host(d, got, sizeof got));
    if (!close_to(got, want, M * N, 1e-5f, "Add")) return 1;

    /* E = Softmax(D) over the last axis. */
    const npurt_tensor *sm_in[1] = {d};
    npurt_tensor *e = NULL;
    CHECK(npurt_execute(rt, "Softmax", "axis=-1", sm_in, 1, &e, 1, NULL, NULL));
    for (int i = 0; i < M; i++) {
        float mx = want[i * N];
        for (int j = 1; j < N; j++) mx = want[i * N + j] > mx ? want[i * N + j] : mx;
        double sum = 0;
        for (int j = 0; j < N; j++) sum += exp((double)want[i * N + j] - mx);
        for (int j = 0; j < N; j++) want[i * N + j] = (float)(exp((double)want[i * N + j] - mx) / sum);
    }
    CHECK(npurt_tensor_to_host(e, got, sizeof got));
    if (!close_to(got, want, M * N, 1e-5f, "Softmax")) return 1;

    /* What a tensor is. */
    npurt_dtype dt = -1;
    int64_t shape[4] = {0};
    size_t rank = 0;
    uint64_t ptr = 0;
    CHECK(npurt_tensor_info(e, &dt, shape, 4, &rank, &ptr));
    if (dt != NPURT_F32 || rank != 2 || shape[0] != M || shape[1] != N || ptr == 0) {
        fprintf(stderr, "tensor_info: dtype %d rank %zu shape %lld x %lld\n", dt, rank,
                (long long)shape[0], (long long)shape[1]);
        return 1;
    }

    npurt_memory_info mem;
    CHECK(npurt_get_memory_info(rt, 0, &mem));
    printf("memory: in use %llu of %llu pool bytes, %llu allocations\n",
           (unsigned long long)mem.in_use_bytes, (unsigned long long)mem.pool_bytes,
           (unsigned long long)mem.allocations);
    if (mem.allocations < 6 || mem.in_use_bytes == 0) return 1;

    npurt_tensor_free(ta);
    npurt_tensor_free(tb);
    npurt_tensor_free(tbias);
    npurt_tensor_free(c);
    npurt_tensor_free(d);
    npurt_tensor_free(e);
    CHECK(npurt_synchronize(rt, 0));
    CHECK(npurt_release_cached(rt, 0));
    npurt_runtime_free(rt);
    printf("OK basic\n");
    return 0;
}
