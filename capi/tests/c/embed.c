/* Sentence embeddings through the C API. Usage: embed MODEL_DIR TEXTS_FILE (one text a
 * line). Checks the convention of npurt_embed's *dim (written by the size query, a buffer
 * too small and success; left alone by every other failure) and that every row has unit
 * length (whether or not the model normalises), then prints one line of floats per text;
 * the harness compares them with the sentence-transformers reference. */
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

/* `call` returns `want`, its message contains `text`, and `*dim` is `dim_want` after it. */
#define EXPECT_DIM(call, want, text, dimvar, dim_want)                                    \
    do {                                                                                  \
        npurt_status s_ = (call);                                                         \
        if (s_ != (want) || ((text) && !strstr(npurt_last_error(), (text))) ||            \
            (dimvar) != (dim_want)) {                                                     \
            fprintf(stderr, "%s:%d: %s: %s (%s), dim %zu (expected %s, dim %zu)\n",       \
                    __FILE__, __LINE__, #call, npurt_status_name(s_), npurt_last_error(), \
                    (size_t)(dimvar), npurt_status_name(want), (size_t)(dim_want));       \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

#define MAX_TEXTS 64
#define UNTOUCHED ((size_t)12345)

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
    if (n == 0) return 2;

    npurt_runtime *rt = NULL;
    CHECK(npurt_runtime_new("backend=cpu", &rt));
    npurt_embedder *e = NULL;
    CHECK(npurt_embedder_new(rt, argv[1], &e));
    const char *const *ctexts = (const char *const *)texts;

    /* Texts are checked before anything else: *dim stays as it was, even for a size
     * query. */
    size_t dim = UNTOUCHED;
    const char *with_null[2] = {"a text", NULL};
    const char *not_utf8[1] = {"caf\xe9"};
    float one = -7.0f;
    EXPECT_DIM(npurt_embed(e, NULL, 2, NULL, 0, &dim), NPURT_ERR_INVALID_ARGUMENT, "texts is NULL", dim,
               UNTOUCHED);
    EXPECT_DIM(npurt_embed(e, with_null, 2, NULL, 0, &dim), NPURT_ERR_INVALID_ARGUMENT, "texts[1] is NULL", dim,
               UNTOUCHED);
    EXPECT_DIM(npurt_embed(e, with_null, 2, &one, 1, &dim), NPURT_ERR_INVALID_ARGUMENT, "texts[1] is NULL", dim,
               UNTOUCHED);
    EXPECT_DIM(npurt_embed(e, not_utf8, 1, &one, 1, &dim), NPURT_ERR_INVALID_ARGUMENT, "not UTF-8", dim,
               UNTOUCHED);
    EXPECT_DIM(npurt_embed(NULL, ctexts, n, NULL, 0, &dim), NPURT_ERR_INVALID_ARGUMENT, "embedder is NULL", dim,
               UNTOUCHED);
    if (one != -7.0f) return 1;

    /* The size query sets *dim (out NULL, or out_len 0). */
    CHECK(npurt_embed(e, ctexts, n, NULL, 0, &dim));
    if (dim == 0 || dim == UNTOUCHED) return 1;
    size_t dim2 = UNTOUCHED;
    CHECK(npurt_embed(e, ctexts, n, &one, 0, &dim2));
    if (dim2 != dim || one != -7.0f) return 1;
    CHECK(npurt_embed(e, ctexts, n, NULL, 0, NULL)); /* *dim not wanted */
    /* A buffer too small: refused, *dim set, the buffer untouched. */
    dim2 = UNTOUCHED;
    EXPECT_DIM(npurt_embed(e, ctexts, n, &one, 1, &dim2), NPURT_ERR_INVALID_ARGUMENT, "needed", dim2, dim);
    if (one != -7.0f) return 1;

    /* Success sets *dim; every row has unit length. */
    float *out = malloc(n * dim * sizeof(float));
    dim2 = UNTOUCHED;
    CHECK(npurt_embed(e, ctexts, n, out, n * dim, &dim2));
    if (dim2 != dim) return 1;
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
    /* No texts: nothing to write, success. */
    CHECK(npurt_embed(e, NULL, 0, out, n * dim, &dim2));
    free(out);
    for (size_t i = 0; i < n; i++) free(texts[i]);
    npurt_embedder_free(e);
    npurt_runtime_free(rt);
    fprintf(stderr, "OK embed (%zu texts, dim %zu)\n", n, dim);
    return 0;
}
