/* Ops by their ONNX operator names and the aliases of the op-name table, in any case, checked against values computed here.
 * Usage: onnx_names (runs on the CPU). */
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

static npurt_runtime *rt;
static int failures = 0;

/* Runs `op` (one output, made by npurt) and compares the output with `want`. */
static void run(const char *op, const char *attrs, const npurt_tensor *const *in, size_t n_in,
                const float *want, size_t n_want) {
    npurt_tensor *out = NULL;
    CHECK(npurt_execute(rt, op, attrs, in, n_in, &out, 1, NULL, NULL));
    float got[16];
    size_t rank = 0;
    int64_t shape[4];
    CHECK(npurt_tensor_info(out, NULL, shape, 4, &rank, NULL));
    size_t n = 1;
    for (size_t i = 0; i < rank; i++) n *= (size_t)shape[i];
    if (n != n_want) {
        fprintf(stderr, "%s: %zu elements, expected %zu\n", op, n, n_want);
        failures++;
    } else {
        CHECK(npurt_tensor_to_host(out, got, n * sizeof(float)));
        for (size_t i = 0; i < n; i++) {
            if (fabsf(got[i] - want[i]) > 1e-5f * (1.0f + fabsf(want[i]))) {
                fprintf(stderr, "%s[%zu] = %g, expected %g\n", op, i, got[i], want[i]);
                failures++;
                break;
            }
        }
    }
    printf("%-20s checked\n", op);
    npurt_tensor_free(out);
}

int main(void) {
    CHECK(npurt_runtime_new("backend=cpu;threads=2", &rt));
    const float x[8] = {-1.5f, 2.0f, -0.25f, 4.0f, 0.5f, -3.0f, 1.0f, 0.0f};
    const int64_t s24[2] = {2, 4}, s4[1] = {4}, s2[1] = {2};
    npurt_tensor *tx = NULL, *gamma = NULL, *beta = NULL, *idx = NULL;
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, s24, 2, x, sizeof x, 0, &tx));
    const float ones[4] = {1, 1, 1, 1}, zeros[4] = {0, 0, 0, 0};
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, s4, 1, ones, sizeof ones, 0, &gamma));
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, s4, 1, zeros, sizeof zeros, 0, &beta));
    const int64_t rows[2] = {1, 0};
    CHECK(npurt_tensor_from_host(rt, NPURT_I64, s2, 1, rows, sizeof rows, 0, &idx));
    const npurt_tensor *one[1] = {tx};
    float want[8];

    for (int i = 0; i < 8; i++) want[i] = x[i] > 0 ? x[i] : 0;
    run("Relu", NULL, one, 1, want, 8);
    run("RELU", NULL, one, 1, want, 8);
    run("Identity", NULL, one, 1, x, 8);
    for (int i = 0; i < 8; i++) want[i] = 0.5f * x[i] * (1.0f + erff(x[i] / sqrtf(2.0f)));
    run("Gelu", NULL, one, 1, want, 8);
    for (int i = 0; i < 8; i++) want[i] = tanhf(x[i]);
    run("tanh", NULL, one, 1, want, 8);

    /* LayerNormalization over the last axis (ONNX's default axis). */
    for (int r = 0; r < 2; r++) {
        double mean = 0, var = 0;
        for (int j = 0; j < 4; j++) mean += x[r * 4 + j] / 4.0;
        for (int j = 0; j < 4; j++) var += (x[r * 4 + j] - mean) * (x[r * 4 + j] - mean) / 4.0;
        for (int j = 0; j < 4; j++) want[r * 4 + j] = (float)((x[r * 4 + j] - mean) / sqrt(var + 1e-5));
    }
    const npurt_tensor *ln[3] = {tx, gamma, beta};
    run("LayerNormalization", "eps=1e-5", ln, 3, want, 8);

    /* Transpose (default: the axes reversed), ReduceSum, ReduceMean, Softmax. */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) want[j * 2 + i] = x[i * 4 + j];
    run("TRANSPOSE", NULL, one, 1, want, 8);
    for (int j = 0; j < 4; j++) want[j] = x[j] + x[4 + j];
    run("ReduceSum", "axes=0;keepdims=0", one, 1, want, 4);
    for (int r = 0; r < 2; r++) want[r] = (x[r * 4] + x[r * 4 + 1] + x[r * 4 + 2] + x[r * 4 + 3]) / 4;
    run("reducemean", "axes=1;keepdims=1", one, 1, want, 2);
    for (int r = 0; r < 2; r++) {
        double sum = 0;
        for (int j = 0; j < 4; j++) sum += exp(x[r * 4 + j]);
        for (int j = 0; j < 4; j++) want[r * 4 + j] = (float)(exp(x[r * 4 + j]) / sum);
    }
    run("softmax", "axis=-1", one, 1, want, 8);
    /* The aliases of the op-name table: SoftmaxV2, and BatchMatMul (x @ x^T). */
    run("SoftmaxV2", "axis=-1", one, 1, want, 8);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            double dot = 0;
            for (int k = 0; k < 4; k++) dot += (double)x[i * 4 + k] * x[j * 4 + k];
            want[i * 2 + j] = (float)dot;
        }
    const npurt_tensor *xx[2] = {tx, tx};
    run("BatchMatMul", "trans_b=true", xx, 2, want, 4);

    /* Gather rows 1 and 0. */
    const npurt_tensor *gi[2] = {tx, idx};
    for (int j = 0; j < 4; j++) {
        want[j] = x[4 + j];
        want[4 + j] = x[j];
    }
    run("Gather", "axis=0", gi, 2, want, 8);

    npurt_tensor_free(tx);
    npurt_tensor_free(gamma);
    npurt_tensor_free(beta);
    npurt_tensor_free(idx);
    npurt_runtime_free(rt);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("OK onnx_names\n");
    return 0;
}
