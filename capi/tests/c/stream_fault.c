/* A kernel failure on a user stream surfaces at npurt_stream_synchronize, with the op, the
 * stream and the submission number in npurt_last_error(); it is reported once and the
 * stream stays usable. Usage: stream_fault EMULATOR_LIBRARY, run on the Ascend backend
 * over acl-emu (the harness sets ASCEND_TOOLKIT_HOME to a toolkit whose libraries are
 * that emulator). The fault comes from the emulator's aclEmuConfigure: the stream's next
 * aclrtSynchronizeStream reports an AI Core exception (507015), as a device reports a
 * kernel that faulted after its launch had returned. */
#include <dlfcn.h>
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

#define REQUIRE(cond)                                                                     \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: %s failed (last error: %s)\n", __FILE__, __LINE__,    \
                    #cond, npurt_last_error());                                           \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

typedef int (*configure_fn)(const char *spec);

/* Relu of `in` queued on `s`; the output is made by npurt. */
static npurt_tensor *relu_on(npurt_runtime *rt, const npurt_tensor *in, npurt_stream *s) {
    const npurt_tensor *ins[1] = {in};
    npurt_tensor *out = NULL;
    npurt_report report;
    CHECK(npurt_execute(rt, "Relu", NULL, ins, 1, &out, 1, s, &report));
    REQUIRE(report.elapsed_ms == -1.0); /* queued, not run */
    return out;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: stream_fault EMULATOR_LIBRARY\n");
        return 2;
    }
    npurt_runtime *rt = NULL;
    CHECK(npurt_runtime_new("backend=acl", &rt));
    /* The same library instance the backend loaded (the loader opens a file once). */
    void *emu = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    REQUIRE(emu != NULL);
    union {
        void *sym;
        configure_fn fn;
    } configure;
    configure.sym = dlsym(emu, "aclEmuConfigure");
    REQUIRE(configure.sym != NULL);

    const float x[4] = {-1, 2, -3, 4}, want[4] = {0, 2, 0, 4};
    const int64_t shape[1] = {4};
    npurt_tensor *tx = NULL;
    CHECK(npurt_tensor_from_host(rt, NPURT_F32, shape, 1, x, sizeof x, 0, &tx));
    npurt_stream *s = NULL;
    CHECK(npurt_stream_new(rt, 0, &s));
    npurt_tensor *ok = relu_on(rt, tx, s);
    CHECK(npurt_stream_synchronize(s));

    /* The next synchronisation of the stream reports a fault of the work queued on it. */
    REQUIRE(configure.fn("fail=aclrtSynchronizeStream:1:507015") == 0);
    npurt_tensor *bad = relu_on(rt, tx, s);
    npurt_status st = npurt_stream_synchronize(s);
    const char *msg = npurt_last_error();
    printf("%s: %s\n", npurt_status_name(st), msg);
    REQUIRE(st == NPURT_ERR_DEVICE);
    REQUIRE(strstr(msg, "ReLU failed on acl:0/stream") != NULL);
    REQUIRE(strstr(msg, "(submission #") != NULL);
    REQUIRE(strstr(msg, "507015") != NULL);

    /* Reported once; the stream runs the next work. */
    REQUIRE(configure.fn("fail=") == 0);
    CHECK(npurt_stream_synchronize(s));
    npurt_tensor *again = relu_on(rt, tx, s);
    CHECK(npurt_stream_synchronize(s));
    float got[4];
    CHECK(npurt_tensor_to_host(again, got, sizeof got));
    REQUIRE(memcmp(got, want, sizeof got) == 0);
    CHECK(npurt_tensor_to_host(ok, got, sizeof got));
    REQUIRE(memcmp(got, want, sizeof got) == 0);

    npurt_tensor_free(tx);
    npurt_tensor_free(ok);
    npurt_tensor_free(bad);
    npurt_tensor_free(again);
    npurt_stream_free(s);
    npurt_runtime_free(rt);
    dlclose(emu);
    printf("OK stream_fault\n");
    return 0;
}
