/* A compiled BERT (the tiny preset, random weights) fed knowing only what
 * npurt_graph_input_info says about its inputs; two runs agree. */
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
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

int main(void) {
    npurt_runtime *rt = NULL;
    CHECK(npurt_runtime_new("backend=cpu;threads=2", &rt));
    npurt_graph *g = NULL;
    CHECK(npurt_graph_from_bert(rt, "tiny", 2, 4, "precision=f32;streams=2;seed=3", &g));
    size_t n = 0;
    CHECK(npurt_graph_input_count(g, &n));
    if (n != 3) return 1;
    npurt_tensor *inputs[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < n; i++) {
        char name[64];
        npurt_dtype dt;
        int64_t shape[8];
        size_t rank = 0;
        CHECK(npurt_graph_input_info(g, i, name, sizeof name, &dt, shape, 8, &rank));
        size_t count = 1;
        for (size_t d = 0; d < rank; d++) count *= (size_t)shape[d];
        printf("input %zu: %s dtype %d rank %zu [%lld, %lld]\n", i, name, dt, rank, (long long)shape[0],
               (long long)shape[1]);
        if (dt == NPURT_I64) {
            int64_t *v = calloc(count, sizeof *v);
            for (size_t k = 0; k < count && strcmp(name, "input_ids") == 0; k++) v[k] = (int64_t)(k * 7 % 50);
            CHECK(npurt_tensor_from_host(rt, dt, shape, rank, v, count * sizeof *v, 0, &inputs[i]));
            free(v);
        } else if (dt == NPURT_F32) {
            float *v = malloc(count * sizeof *v);
            for (size_t k = 0; k < count; k++) v[k] = 1.0f;
            CHECK(npurt_tensor_from_host(rt, dt, shape, rank, v, count * sizeof *v, 0, &inputs[i]));
            free(v);
        } else {
            fprintf(stderr, "unexpected dtype %d\n", dt);
            return 1;
        }
    }
    char tiny[2];
    if (npurt_graph_input_info(g, 0, tiny, sizeof tiny, NULL, NULL, 0, NULL) != NPURT_ERR_INVALID_ARGUMENT) return 1;
    if (npurt_graph_input_info(g, 3, NULL, 0, NULL, NULL, 0, NULL) != NPURT_ERR_INVALID_ARGUMENT) return 1;

    const npurt_tensor *ins[3] = {inputs[0], inputs[1], inputs[2]};
    npurt_tensor *out = NULL;
    CHECK(npurt_graph_run(g, ins, 3, &out, 1));
    npurt_dtype dt;
    int64_t shape[3];
    size_t rank = 0;
    CHECK(npurt_tensor_info(out, &dt, shape, 3, &rank, NULL));
    if (dt != NPURT_F32 || rank != 3 || shape[0] != 2 || shape[1] != 4) return 1;
    size_t count = (size_t)(shape[0] * shape[1] * shape[2]);
    float *first = malloc(count * sizeof(float)), *second = malloc(count * sizeof(float));
    CHECK(npurt_tensor_to_host(out, first, count * sizeof(float)));
    /* The second run writes into the existing output tensor. */
    CHECK(npurt_graph_run(g, ins, 3, &out, 1));
    CHECK(npurt_tensor_to_host(out, second, count * sizeof(float)));
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(first[i]) || fabsf(first[i] - second[i]) > 1e-6f) {
            fprintf(stderr, "[%zu]: %g then %g\n", i, first[i], second[i]);
            return 1;
        }
    }
    /* Wrong inputs are refused. */
    const npurt_tensor *swapped[3] = {inputs[2], inputs[1], inputs[0]};
    if (npurt_graph_run(g, swapped, 3, &out, 1) != NPURT_ERR_VALIDATION) return 1;
    printf("hidden [%lld, %lld, %lld], first value %g\n", (long long)shape[0], (long long)shape[1],
           (long long)shape[2], first[0]);
    free(first);
    free(second);
    for (int i = 0; i < 3; i++) npurt_tensor_free(inputs[i]);
    npurt_tensor_free(out);
    npurt_graph_free(g);
    npurt_runtime_free(rt);
    printf("OK graph\n");
    return 0;
}
