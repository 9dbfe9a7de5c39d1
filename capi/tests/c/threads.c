/* Streams and events from 4 C threads: each thread queues a chain of ops on its own
 * stream, after waiting (through an event) for a tensor another stream produced, times
 * the chain with events and checks the result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <threads.h>

#include "npurt.h"

#define THREADS 4
#define N 16
#define STEPS 6

#define CHECK(call)                                                                       \
    do {                                                                                  \
        npurt_status s_ = (call);                                                         \
        if (s_ != NPURT_OK) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,             \
                    npurt_status_name(s_), npurt_last_error());                           \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

static npurt_runtime *rt;
static npurt_tensor *shared_x;  /* written on the producer stream */
static npurt_event *produced;   /* recorded after it */

typedef struct {
    int index;
    float ms;
} job;

/* y = x * (index + 1) ... through STEPS Scale-free ops: y = y + x, STEPS times. */
static int worker(void *arg) {
    job *j = arg;
    npurt_stream *s = NULL;
    npurt_event *start = NULL, *end = NULL;
    CHECK(npurt_stream_new(rt, 0, &s));
    CHECK(npurt_event_new(rt, 0, &start));
    CHECK(npurt_event_new(rt, 0, &end));
    CHECK(npurt_stream_wait_event(s, produced));
    CHECK(npurt_event_record(start, s));
    const int64_t shape[2] = {N, N};
    float ones[N * N];
    for (int i = 0; i < N * N; i++) ones[i] = (float)(j->index + 1);
    npurt_tensor *y = NULL;
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, shape, 2, ones, sizeof ones, 0, &y));
    for (int step = 0; step < STEPS; step++) {
        const npurt_tensor *in[2] = {y, shared_x};
        npurt_tensor *next = NULL;
        npurt_report r;
        CHECK(npurt_execute(rt, "Add", NULL, in, 2, &next, 1, s, &r));
        if (r.elapsed_ms != -1.0) {
            fprintf(stderr, "a queued op reports elapsed_ms %g\n", r.elapsed_ms);
            return 1;
        }
        npurt_tensor_free(y); /* released once the queued op is done */
        y = next;
    }
    /* A product on the same stream: y x I = y. */
    float eye[N * N] = {0};
    for (int i = 0; i < N; i++) eye[i * N + i] = 1.0f;
    npurt_tensor *ti = NULL, *z = NULL;
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, shape, 2, eye, sizeof eye, 0, &ti));
    const npurt_tensor *mm[2] = {y, ti};
    CHECK(npurt_execute(rt, "MatMul", NULL, mm, 2, &z, 1, s, NULL));
    CHECK(npurt_event_record(end, s));
    CHECK(npurt_event_synchronize(end));
    int32_t done = 0;
    CHECK(npurt_event_query(end, &done));
    if (!done) {
        fprintf(stderr, "thread %d: the event is not done after synchronize\n", j->index);
        return 1;
    }
    CHECK(npurt_event_elapsed_ms(start, end, &j->ms));
    CHECK(npurt_stream_synchronize(s));
    float got[N * N];
    CHECK(npurt_tensor_to_host(z, got, sizeof got));
    for (int i = 0; i < N * N; i++) {
        float want = (float)(j->index + 1) + STEPS * (float)(i % 7);
        if (fabsf(got[i] - want) > 1e-4f) {
            fprintf(stderr, "thread %d: [%d] = %g, expected %g\n", j->index, i, got[i], want);
            return 1;
        }
    }
    npurt_tensor_free(y);
    npurt_tensor_free(ti);
    npurt_tensor_free(z);
    npurt_event_free(start);
    npurt_event_free(end);
    npurt_stream_free(s);
    return 0;
}

int main(void) {
    CHECK(npurt_runtime_new("backend=cpu;threads=2;max_streams=8", &rt));
    /* The producer: x = base + 0 on a stream of its own, then an event. */
    const int64_t shape[2] = {N, N};
    float base[N * N];
    for (int i = 0; i < N * N; i++) base[i] = (float)(i % 7);
    npurt_tensor *b = NULL, *zero = NULL;
    float zeros[N * N] = {0};
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, shape, 2, base, sizeof base, 0, &b));
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, shape, 2, zeros, sizeof zeros, 0, &zero));
    npurt_stream *producer = NULL;
    CHECK(npurt_stream_new(rt, 0, &producer));
    CHECK(npurt_event_new(rt, 0, &produced));
    const npurt_tensor *in[2] = {b, zero};
    CHECK(npurt_execute(rt, "Add", NULL, in, 2, &shared_x, 1, producer, NULL));
    CHECK(npurt_event_record(produced, producer));

    thrd_t t[THREADS];
    job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i].index = i;
        jobs[i].ms = -1;
        if (thrd_create(&t[i], worker, &jobs[i]) != thrd_success) return 1;
    }
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        int rc = 1;
        thrd_join(t[i], &rc);
        failed |= rc;
        printf("thread %d: rc %d, %.3f ms\n", i, rc, jobs[i].ms);
        if (jobs[i].ms < 0) failed = 1;
    }
    CHECK(npurt_stream_synchronize(producer));
    npurt_stream_free(producer);
    npurt_event_free(produced);
    npurt_tensor_free(shared_x);
    npurt_tensor_free(b);
    npurt_tensor_free(zero);
    CHECK(npurt_synchronize(rt, 0));
    npurt_runtime_free(rt);
    if (failed) return 1;
    printf("OK threads\n");
    return 0;
}
