/* Misused handles and buffers are errors, never crashes: a double release, a use after
 * release, a handle of the wrong type and a value npurt never handed out are
 * NPURT_ERR_INVALID_HANDLE with a message naming the argument; a buffer whose size does
 * not match the tensor's is NPURT_ERR_INVALID_ARGUMENT with nothing read or written past
 * it (the buffers here are malloc'd at exactly the size passed, so that valgrind would see
 * an access past them). Four threads release the same handles at once (each released
 * exactly once) and one thread reads a tensor while another releases it.
 * Usage: handles (no arguments). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
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
        printf("%-26s %s: %s\n", npurt_status_name(got), what, want == NPURT_OK ? "" : msg);
    }
}
#define EXPECT(call, want, text) expect((call), (want), (text), #call, __LINE__)
#define INVALID NPURT_ERR_INVALID_HANDLE

enum { SHARED = 8, THREADS = 4 };
static npurt_tensor *shared[SHARED];

/* Releases every shared tensor; counts the releases that succeeded. */
static void *release_all(void *arg) {
    int *ok = arg;
    for (int i = 0; i < SHARED; i++) {
        npurt_status s = npurt_tensor_free(shared[i]);
        if (s == NPURT_OK) {
            (*ok)++;
        } else if (s != INVALID || !strstr(npurt_last_error(), "was already released")) {
            fprintf(stderr, "release_all: %s: %s\n", npurt_status_name(s), npurt_last_error());
            *ok = -1000;
        }
    }
    return NULL;
}

struct reader {
    npurt_tensor *t;
    atomic_int ok, done;
    int invalid, other;
};

/* Reads a tensor until its handle is released by another thread. */
static void *read_until_released(void *arg) {
    struct reader *r = arg;
    float v[6];
    for (;;) {
        npurt_status s = npurt_tensor_to_host(r->t, v, sizeof v);
        if (s == NPURT_OK) {
            atomic_fetch_add(&r->ok, 1);
        } else if (s == INVALID) {
            r->invalid++;
            break;
        } else {
            fprintf(stderr, "reader: %s: %s\n", npurt_status_name(s), npurt_last_error());
            r->other++;
            break;
        }
    }
    atomic_store(&r->done, 1);
    return NULL;
}

int main(void) {
    npurt_runtime *rt = NULL;
    EXPECT(npurt_runtime_new("backend=cpu;threads=2", &rt), NPURT_OK, NULL);
    if (!rt) return 1;
    const int64_t s23[2] = {2, 3};
    const float data[6] = {1, 2, 3, 4, 5, 6};
    npurt_tensor *t = NULL;
    EXPECT(npurt_tensor_from_host(rt, NPURT_F32, s23, 2, data, sizeof data, 0, &t), NPURT_OK, NULL);
    if (!t) return 1;

    /* Buffers smaller than the tensor: refused, nothing read or written past them. */
    float *small = malloc(4 * sizeof(float));
    for (int i = 0; i < 4; i++) small[i] = -1.0f;
    EXPECT(npurt_tensor_to_host(t, small, 4 * sizeof(float)), NPURT_ERR_INVALID_ARGUMENT,
           "nbytes is 16 but the f32 [2, 3] tensor holds 24 bytes");
    for (int i = 0; i < 4; i++)
        if (small[i] != -1.0f) failures++;
    npurt_tensor *t2 = (npurt_tensor *)&failures;
    EXPECT(npurt_tensor_from_host(rt, NPURT_F32, s23, 2, small, 4 * sizeof(float), 0, &t2),
           NPURT_ERR_INVALID_ARGUMENT, "nbytes is 16 but a f32 [2, 3] tensor holds 24 bytes");
    if (t2 != (npurt_tensor *)&failures) failures++;
    free(small);
    int64_t *shape1 = malloc(sizeof(int64_t));
    size_t rank = 99;
    EXPECT(npurt_tensor_info(t, NULL, shape1, 1, &rank, NULL), NPURT_ERR_INVALID_ARGUMENT,
           "max_rank is 1 but the shape has 2 dimensions");
    if (rank != 99) failures++;
    free(shape1);
    char *tiny = malloc(4);
    size_t needed = 0;
    EXPECT(npurt_runtime_info(rt, tiny, 4, &needed), NPURT_ERR_INVALID_ARGUMENT, "buffer of 4 bytes is too small");
    if (needed <= 4) failures++;
    free(tiny);

    /* Handles of the wrong type. */
    float out[6];
    EXPECT(npurt_tensor_to_host((npurt_tensor *)rt, out, sizeof out), INVALID,
           "tensor: 0x");
    EXPECT(npurt_tensor_to_host((npurt_tensor *)rt, out, sizeof out), INVALID,
           "is an npurt_runtime handle, not an npurt_tensor");
    EXPECT(npurt_stream_synchronize((npurt_stream *)t), INVALID, "is an npurt_tensor handle, not an npurt_stream");
    EXPECT(npurt_embedder_free((npurt_embedder *)rt), INVALID, "is an npurt_runtime handle, not an npurt_embedder");
    EXPECT(npurt_graph_free((npurt_graph *)t), INVALID, "is an npurt_tensor handle, not an npurt_graph");
    const npurt_tensor *wrong_in[2] = {t, (const npurt_tensor *)rt};
    npurt_tensor *sum = NULL;
    EXPECT(npurt_execute(rt, "Add", NULL, wrong_in, 2, &sum, 1, NULL, NULL), INVALID,
           "inputs[1]: 0x");
    /* The runtime survived the attempt to free it as an embedder. */
    int32_t devices = 0;
    EXPECT(npurt_device_count(rt, &devices), NPURT_OK, NULL);

    /* Values npurt never handed out. */
    int local = 0;
    void *heap = malloc(64);
    EXPECT(npurt_tensor_free((npurt_tensor *)&local), INVALID, "is not a handle npurt made");
    EXPECT(npurt_tensor_to_host((npurt_tensor *)heap, out, sizeof out), INVALID, "is not a handle npurt made");
    EXPECT(npurt_device_count((npurt_runtime *)(uintptr_t)1, &devices), INVALID, "is not a handle npurt made");
    free(heap);

    /* A stream, an event and a graph: released twice, used after release. */
    npurt_stream *s = NULL;
    npurt_event *ev = NULL;
    npurt_graph *g = NULL;
    EXPECT(npurt_stream_new(rt, 0, &s), NPURT_OK, NULL);
    EXPECT(npurt_event_new(rt, 0, &ev), NPURT_OK, NULL);
    EXPECT(npurt_graph_from_bert(rt, "tiny", 1, 4, "seed=1", &g), NPURT_OK, NULL);
    EXPECT(npurt_stream_free(s), NPURT_OK, NULL);
    EXPECT(npurt_stream_free(s), INVALID, "npurt_stream handle 0x");
    EXPECT(npurt_stream_synchronize(s), INVALID, "was already released");
    EXPECT(npurt_event_record(ev, s), INVALID, "stream: npurt_stream handle");
    const npurt_tensor *relu_in[1] = {t};
    npurt_tensor *relu = NULL;
    EXPECT(npurt_execute(rt, "Relu", NULL, relu_in, 1, &relu, 1, s, NULL), INVALID, "was already released");
    if (relu != NULL) failures++;
    EXPECT(npurt_event_free(ev), NPURT_OK, NULL);
    int32_t done = 0;
    EXPECT(npurt_event_query(ev, &done), INVALID, "event: npurt_event handle");
    EXPECT(npurt_event_free(ev), INVALID, "was already released");
    size_t n_in = 0;
    EXPECT(npurt_graph_input_count(g, &n_in), NPURT_OK, NULL);
    EXPECT(npurt_graph_free(g), NPURT_OK, NULL);
    EXPECT(npurt_graph_input_count(g, &n_in), INVALID, "graph: npurt_graph handle");
    EXPECT(npurt_graph_free(g), INVALID, "was already released");

    /* A tensor: released twice, used after release, as an input and as an output. */
    npurt_tensor *u = NULL;
    EXPECT(npurt_tensor_new(rt, NPURT_F32, s23, 2, 0, &u), NPURT_OK, NULL);
    EXPECT(npurt_tensor_free(u), NPURT_OK, NULL);
    EXPECT(npurt_tensor_free(u), INVALID, "tensor: npurt_tensor handle");
    EXPECT(npurt_tensor_to_host(u, out, sizeof out), INVALID, "was already released");
    const npurt_tensor *gone_in[1] = {u};
    EXPECT(npurt_execute(rt, "Relu", NULL, gone_in, 1, &relu, 1, NULL, NULL), INVALID, "inputs[0]: npurt_tensor");
    npurt_tensor *gone_out[1] = {u};
    EXPECT(npurt_execute(rt, "Relu", NULL, relu_in, 1, gone_out, 1, NULL, NULL), INVALID, "outputs[0]: npurt_tensor");

    /* Four threads release the same eight tensors: each is released once. */
    for (int i = 0; i < SHARED; i++)
        EXPECT(npurt_tensor_from_host(rt, NPURT_F32, s23, 2, data, sizeof data, 0, &shared[i]), NPURT_OK, NULL);
    pthread_t th[THREADS];
    int released[THREADS] = {0};
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, release_all, &released[i]);
    int total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        total += released[i];
    }
    printf("concurrent releases: %d of %d succeeded\n", total, SHARED);
    if (total != SHARED) failures++;

    /* A tensor read by one thread while another releases it: the reads succeed until
     * they see NPURT_ERR_INVALID_HANDLE; nothing else. */
    struct reader r = {NULL, 0, 0, 0, 0};
    EXPECT(npurt_tensor_from_host(rt, NPURT_F32, s23, 2, data, sizeof data, 0, &r.t), NPURT_OK, NULL);
    pthread_t rd;
    pthread_create(&rd, NULL, read_until_released, &r);
    /* Released while the reader is reading (after its first reads). */
    while (atomic_load(&r.ok) < 3 && !atomic_load(&r.done)) sched_yield();
    EXPECT(npurt_tensor_free(r.t), NPURT_OK, NULL);
    pthread_join(rd, NULL);
    printf("reader: %s after its reads\n", r.invalid ? "NPURT_ERR_INVALID_HANDLE" : "-");
    if (r.other != 0 || r.invalid != 1 || atomic_load(&r.ok) < 3) failures++;

    /* The runtime: released twice, used after release; its tensor stays usable. */
    EXPECT(npurt_runtime_free(rt), NPURT_OK, NULL);
    EXPECT(npurt_runtime_free(rt), INVALID, "runtime: npurt_runtime handle");
    EXPECT(npurt_tensor_new(rt, NPURT_F32, s23, 2, 0, &u), INVALID, "was already released");
    EXPECT(npurt_tensor_to_host(t, out, sizeof out), NPURT_OK, NULL);
    if (memcmp(out, data, sizeof out) != 0) failures++;
    EXPECT(npurt_tensor_free(t), NPURT_OK, NULL);
    EXPECT(npurt_tensor_free(NULL), NPURT_OK, NULL);
#ifdef NPURT_DEBUG_HOOKS
    size_t live = npurt_debug_live_handles();
    printf("live handles at the end: %zu\n", live);
    if (live != 0) failures++;
#endif
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("OK handles\n");
    return 0;
}
