/* Sentence embeddings through the C API. Usage: embed MODEL_DIR TEXTS_FILE (one text a
 * line). Prints one line of floats per text; the harness compares them with the
 * sentence-transformers reference. */
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

#define MAX_TEXTS 64

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: embed MODEL_DIR TEXTS_FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 2;
    char *texts[MAX_TEXTS];
    size_t n = 0;
    char line[4096];
    while (n < MAX_TEXTS && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        texts[n] = malloc(strlen(line) + 1);
        strcpy(texts[n], line);
        n++;
    }
    fclose(f);

    npurt_runtime *rt = NULL;
    CHECK(npurt_runtime_new("backend=cpu", &rt));
    npurt_embedder *e = NULL;
    CHECK(npurt_embedder_new(rt, argv[1], &e));
    const char *const *ctexts = (const char *const *)texts;
    size_t dim = 0;
    CHECK(npurt_embed(e, ctexts, n, NULL, 0, &dim)); /* the size query */
    if (dim == 0) return 1;
    float one;
    size_t dim2 = 0;
    if (npurt_embed(e, ctexts, n, &one, 1, &dim2) != NPURT_ERR_INVALID_ARGUMENT || dim2 != dim) {
        fprintf(stderr, "a buffer too small is not refused\n");
        return 1;
    }
    float *out = malloc(n * dim * sizeof(float));
    CHECK(npurt_embed(e, ctexts, n, out, n * dim, &dim));
    for (size_t i = 0; i < n; i++) {
        double norm = 0;
        for (size_t j = 0; j < dim; j++) norm += (double)out[i * dim + j] * out[i * dim + j];
        if (fabs(sqrt(norm) - 1.0) > 1e-5) {
            fprintf(stderr, "row %zu has norm %g\n", i, sqrt(norm));
            return 1;
        }
        for (size_t j = 0; j < dim; j++) printf(j ? " %.9g" : "%.9g", out[i * dim + j]);
        printf("\n");
    }
    free(out);
    for (size_t i = 0; i < n; i++) free(texts[i]);
    npurt_embedder_free(e);
    npurt_runtime_free(rt);
    fprintf(stderr, "OK embed (%zu texts, dim %zu)\n", n, dim);
    return 0;
}
