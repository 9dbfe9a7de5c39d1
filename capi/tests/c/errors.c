/* Every error code on purpose, with its message; out-parameters untouched on failure.
 * Usage: errors MODEL_DIR, a directory whose config.json asks for a ReLU activation. The
 * harness runs it with NPURT_ACL_LIB_DIR pointing at an empty directory, so that the
 * Ascend backend is unavailable, and compiles it with NPURT_DEBUG_HOOKS defined against a
 * library built with the debug-hooks feature, whose npurt_debug_panic() panics inside
 * npurt on purpose (NPURT_ERR_INTERNAL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npurt.h"

static int failures = 0;

/* `got` must be `want`, and the last error must contain `text`. */
static void expect(npurt_status got, npurt_status want, const char *text, const char *what, int line) {
    const char *msg = npurt_last_error();
    if (got != want) {
        fprintf(stderr, "line %d: %s: got %s, expected %s (%s)\n", line, what, npurt_status_name(got),
                npurt_status_name(want), msg);
        failures++;
    } else if (text && !strstr(msg, text)) {
        fprintf(stderr, "line %d: %s: message %s lacks %s\n", line, what, msg, text);
        failures++;
    } else {
        printf("%-30s %s: %s\n", npurt_status_name(got), what, want == NPURT_OK ? "" : msg);
    }
}
#define EXPECT(call, want, text) expect((call), (want), (text), #call, __LINE__)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: errors MODEL_DIR (a config.json with hidden_act relu)\n");
        return 2;
    }
    const char *model_dir = argv[1];
    npurt_runtime *rt = NULL;
    EXPECT(npurt_runtime_new("backend=cpu;threads=2;max_streams=1", &rt), NPURT_OK, NULL);
    if (!rt) return 1;
    if (strcmp(npurt_status_name(NPURT_ERR_DEVICE), "NPURT_ERR_DEVICE") != 0) failures++;
    if (strcmp(npurt_status_name(12345), "NPURT_ERR_UNKNOWN") != 0) failures++;

    /* NULL arguments. */
    npurt_runtime *sentinel = (npurt_runtime *)&failures;
    npurt_runtime *r2 = sentinel;
    EXPECT(npurt_runtime_new(NULL, NULL), NPURT_ERR_INVALID_ARGUMENT, "out is NULL");
    int32_t n = -7;
    EXPECT(npurt_device_count(NULL, &n), NPURT_ERR_INVALID_ARGUMENT, "runtime is NULL");
    if (n != -7) failures++;
    EXPECT(npurt_device_count(rt, NULL), NPURT_ERR_INVALID_ARGUMENT, "out is NULL");
    npurt_tensor *t = (npurt_tensor *)sentinel;
    const int64_t s23[2] = {2, 3};
    EXPECT(npurt_tensor_new(rt, NPURT_F32, NULL, 2, 0, &t), NPURT_ERR_INVALID_ARGUMENT, "shape is NULL");
    if (t != (npurt_tensor *)sentinel) failures++;
    EXPECT(npurt_tensor_to_host(NULL, NULL, 0), NPURT_ERR_INVALID_ARGUMENT, "tensor is NULL");
    EXPECT(npurt_execute(rt, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL), NPURT_ERR_INVALID_ARGUMENT, "op is NULL");
    EXPECT(npurt_stream_synchronize(NULL), NPURT_ERR_INVALID_ARGUMENT, "stream is NULL");
    EXPECT(npurt_event_record(NULL, NULL), NPURT_ERR_INVALID_ARGUMENT, "event is NULL");
    EXPECT(npurt_graph_run(NULL, NULL, 0, NULL, 0), NPURT_ERR_INVALID_ARGUMENT, "graph is NULL");
    EXPECT(npurt_embed(NULL, NULL, 0, NULL, 0, NULL), NPURT_ERR_INVALID_ARGUMENT, "embedder is NULL");
    /* Every _free accepts NULL. */
    npurt_runtime_free(NULL);
    npurt_tensor_free(NULL);
    npurt_stream_free(NULL);
    npurt_event_free(NULL);
    npurt_graph_free(NULL);
    npurt_embedder_free(NULL);

    /* Unknown and malformed options; out of range enum values. */
    EXPECT(npurt_runtime_new("backend=cpu;colour=blue", &r2), NPURT_ERR_INVALID_ARGUMENT,
           "unknown runtime option \"colour\"");
    EXPECT(npurt_runtime_new("threads=lots", &r2), NPURT_ERR_INVALID_ARGUMENT, "threads");
    EXPECT(npurt_runtime_new("backend=cpu;pool_limit=1", &r2), NPURT_ERR_INVALID_ARGUMENT, "pool limit");
    EXPECT(npurt_runtime_new("backend", &r2), NPURT_ERR_INVALID_ARGUMENT, "not key=value");
    if (r2 != sentinel) failures++;
    EXPECT(npurt_tensor_new(rt, 99, s23, 2, 0, &t), NPURT_ERR_INVALID_ARGUMENT, "not an npurt_dtype");
    const int64_t neg[2] = {2, -3};
    EXPECT(npurt_tensor_new(rt, NPURT_F32, neg, 2, 0, &t), NPURT_ERR_INVALID_ARGUMENT, "dimension 1 is -3");
    float six[6] = {1, 2, 3, 4, 5, 6};
    EXPECT(npurt_tensor_from_host(rt, NPURT_F32, s23, 2, six, 5 * sizeof(float), 0, &t),
           NPURT_ERR_INVALID_ARGUMENT, "holds 24 bytes");

    /* The backend asked for is not present. */
    EXPECT(npurt_runtime_new("backend=acl", &r2), NPURT_ERR_BACKEND_UNAVAILABLE, "Ascend not available");
    if (r2 != sentinel) failures++;

    /* Bad shapes, unknown op, bad attributes. */
    npurt_tensor *a = NULL, *b = NULL, *c = NULL;
    EXPECT(npurt_tensor_from_host(rt, NPURT_F32, s23, 2, six, sizeof six, 0, &a), NPURT_OK, NULL);
    EXPECT(npurt_tensor_from_host(rt, NPURT_F32, s23, 2, six, sizeof six, 0, &b), NPURT_OK, NULL);
    const npurt_tensor *ab[2] = {a, b};
    c = (npurt_tensor *)NULL;
    EXPECT(npurt_execute(rt, "MatMul", NULL, ab, 2, &c, 1, NULL, NULL), NPURT_ERR_VALIDATION, "MatMul");
    if (c != NULL) failures++;
    EXPECT(npurt_execute(rt, "Frobnicate", NULL, ab, 2, &c, 1, NULL, NULL), NPURT_ERR_INVALID_ARGUMENT,
           "unknown op \"Frobnicate\"");
    EXPECT(npurt_execute(rt, "MatMul", "trans_b=maybe", ab, 2, &c, 1, NULL, NULL), NPURT_ERR_VALIDATION,
           "trans_b");
    EXPECT(npurt_execute(rt, "Add", NULL, ab, 2, &c, 2, NULL, NULL), NPURT_ERR_INVALID_ARGUMENT, "n_outputs is 2");
    /* An existing output of the wrong shape is refused. */
    const int64_t s32[2] = {3, 2};
    npurt_tensor *wrong = NULL;
    EXPECT(npurt_tensor_new(rt, NPURT_F32, s32, 2, 0, &wrong), NPURT_OK, NULL);
    npurt_tensor *const wrong_was = wrong;
    EXPECT(npurt_execute(rt, "Add", NULL, ab, 2, &wrong, 1, NULL, NULL), NPURT_ERR_VALIDATION,
           "Add: output 0 must be f32 [2, 3], got f32 [3, 2]");
    if (wrong != wrong_was) failures++;
    /* The transposed product is fine; the ONNX spelling of an op is accepted. */
    EXPECT(npurt_execute(rt, "MatMul", "trans_b=true", ab, 2, &c, 1, NULL, NULL), NPURT_OK, NULL);
    npurt_tensor *p = NULL;
    const npurt_tensor *ca[1] = {c};
    EXPECT(npurt_execute(rt, "Transpose", "perm=1,0", ca, 1, &p, 1, NULL, NULL), NPURT_OK, NULL);
    /* Byte counts must match; shape buffers must be large enough. */
    float out[4];
    EXPECT(npurt_tensor_to_host(c, out, 3 * sizeof(float)), NPURT_ERR_INVALID_ARGUMENT, "holds 16 bytes");
    int64_t shape[1] = {-1};
    size_t rank = 99;
    EXPECT(npurt_tensor_info(c, NULL, shape, 1, &rank, NULL), NPURT_ERR_INVALID_ARGUMENT, "max_rank is 1");
    if (rank != 99 || shape[0] != -1) failures++;
    EXPECT(npurt_tensor_info(c, NULL, NULL, 0, &rank, NULL), NPURT_OK, NULL);
    if (rank != 2) failures++;

    /* Size queries: NULL buffer, then one too small. */
    size_t needed = 0;
    char small[4];
    EXPECT(npurt_runtime_info(rt, NULL, 0, &needed), NPURT_OK, NULL);
    size_t want = needed;
    needed = 0;
    EXPECT(npurt_runtime_info(rt, small, sizeof small, &needed), NPURT_ERR_INVALID_ARGUMENT, "too small");
    if (needed != want || want < 10) failures++;

    /* Devices and streams: a device that does not exist, more streams than max_streams. */
    EXPECT(npurt_tensor_new(rt, NPURT_F32, s23, 2, 5, &t), NPURT_ERR_DEVICE, "device 5 does not exist");
    EXPECT(npurt_synchronize(rt, -1), NPURT_ERR_DEVICE, "device -1");
    npurt_stream *s1 = NULL, *s2 = NULL;
    EXPECT(npurt_stream_new(rt, 0, &s1), NPURT_OK, NULL);
    EXPECT(npurt_stream_new(rt, 0, &s2), NPURT_ERR_DEVICE, "max_streams");
    if (s2 != NULL) failures++;
    npurt_stream_free(s1);
    EXPECT(npurt_stream_new(rt, 0, &s2), NPURT_OK, NULL);
    npurt_stream_free(s2);

    /* Unsupported: a model whose activation npurt does not implement (argv[1]: its
     * directory); a preset that is not one; unknown graph options. */
    npurt_graph *g = NULL;
    EXPECT(npurt_graph_from_bert(rt, model_dir, 1, 4, NULL, &g), NPURT_ERR_UNSUPPORTED, "relu");
    EXPECT(npurt_graph_from_bert(rt, "tiny", 1, 4, "precision=f8", &g), NPURT_ERR_INVALID_ARGUMENT, "f8");
    EXPECT(npurt_graph_from_bert(rt, "no-such-model", 1, 4, NULL, &g), NPURT_ERR_INVALID_ARGUMENT, "preset");
    EXPECT(npurt_graph_from_bert(rt, "tiny", 1, 4, "speed=max", &g), NPURT_ERR_INVALID_ARGUMENT,
           "unknown graph option");
    EXPECT(npurt_embedder_new(rt, "/nonexistent/model", NULL), NPURT_ERR_INVALID_ARGUMENT, "out is NULL");
    if (g != NULL) failures++;

    /* Out of memory under a small pool limit. */
    npurt_runtime *small_rt = NULL;
    EXPECT(npurt_runtime_new("backend=cpu;threads=1;pool_limit=1M", &small_rt), NPURT_OK, NULL);
    const int64_t big[2] = {1024, 1024};
    npurt_tensor *huge = NULL;
    EXPECT(npurt_tensor_new(small_rt, NPURT_F32, big, 2, 0, &huge), NPURT_ERR_OUT_OF_MEMORY, "out of memory");
    if (huge != NULL) failures++;
    npurt_memory_info mem;
    EXPECT(npurt_get_memory_info(small_rt, 0, &mem), NPURT_OK, NULL);
    if (mem.limit_bytes != 1u << 20) failures++;
    npurt_runtime_free(small_rt);

    /* A bug in npurt (a panic) is NPURT_ERR_INTERNAL with the panic's message, and the
     * library goes on working. */
#ifdef NPURT_DEBUG_HOOKS
    EXPECT(npurt_debug_panic("the kernel table is empty"), NPURT_ERR_INTERNAL,
           "internal error (panic): the kernel table is empty");
    EXPECT(npurt_debug_panic(NULL), NPURT_ERR_INTERNAL, "internal error (panic): npurt_debug_panic");
    n = -7;
    EXPECT(npurt_device_count(rt, &n), NPURT_OK, NULL);
    if (n != 1) failures++;
#else
    printf("SKIP NPURT_ERR_INTERNAL: built without NPURT_DEBUG_HOOKS\n");
#endif

    npurt_tensor_free(a);
    npurt_tensor_free(b);
    npurt_tensor_free(c);
    npurt_tensor_free(p);
    npurt_tensor_free(wrong);
    npurt_runtime_free(rt);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("OK errors\n");
    return 0;
}
