/*
 * Runs an ONNX model on npurt's ONNX Runtime execution provider from C.
 *
 *   run_model LIBRARY MODEL [KEY=VALUE ...]
 *
 * LIBRARY is libnpurt_ort_ep.so (`cargo build -p npurt-ort-ep --release`), MODEL an ONNX
 * file with one float input `x` of shape [2, 4] and one float output `y`; each KEY=VALUE is
 * an EP option (`backend=cpu`, `precision=f32`, ... see docs/ONNXRUNTIME.md). The program
 * registers the library with OrtApi::RegisterExecutionProviderLibrary, selects the devices
 * NpurtExecutionProvider offers with OrtApi::SessionOptionsAppendExecutionProvider_V2, turns
 * off the CPU EP fallback (so the session fails instead of silently running a node on ORT's
 * CPU EP), runs x = (i - 3.5) / 2 and prints y one value per line.
 *
 * Build against ONNX Runtime's C API (the header onnxruntime_c_api.h and libonnxruntime
 * of an ONNX Runtime 1.23 or newer release; the `onnxruntime` Python wheel's
 * onnxruntime/capi/libonnxruntime.so.* links as well):
 *
 *   cc -std=c11 -I$ORT_HOME/include run_model.c -L$ORT_HOME/lib -lonnxruntime -o run_model
 *
 * python/tests/test_ort_c_example.py builds and runs it where a header is present.
 */
#include <onnxruntime_c_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EP_NAME "NpurtExecutionProvider"
#define MAX_OPTIONS 16

static const OrtApi *ort;

/* Prints and releases a failed status; returns 1 when there was one. */
static int failed(OrtStatus *status, const char *what) {
    if (status == NULL) return 0;
    fprintf(stderr, "%s: %s\n", what, ort->GetErrorMessage(status));
    ort->ReleaseStatus(status);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIBRARY MODEL [KEY=VALUE ...]\n", argv[0]);
        return 2;
    }
    const char *keys[MAX_OPTIONS], *values[MAX_OPTIONS];
    char *copies[MAX_OPTIONS];
    size_t n_options = 0;
    for (int i = 3; i < argc && n_options < MAX_OPTIONS; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "option %s is not KEY=VALUE\n", argv[i]);
            return 2;
        }
        size_t len = strlen(argv[i]) + 1;
        copies[n_options] = malloc(len);
        if (copies[n_options] == NULL) return 1;
        memcpy(copies[n_options], argv[i], len);
        copies[n_options][eq - argv[i]] = '\0';
        keys[n_options] = copies[n_options];
        values[n_options] = copies[n_options] + (eq - argv[i]) + 1;
        n_options++;
    }

    ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    if (ort == NULL) {
        fprintf(stderr, "this ONNX Runtime (%s) does not offer API version %d\n",
                OrtGetApiBase()->GetVersionString(), ORT_API_VERSION);
        return 1;
    }

    int rc = 1;
    OrtEnv *env = NULL;
    OrtSessionOptions *options = NULL;
    OrtSession *session = NULL;
    OrtMemoryInfo *memory = NULL;
    OrtValue *input = NULL, *output = NULL;
    int registered = 0;

    if (failed(ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "run_model", &env), "CreateEnv")) goto done;
    if (failed(ort->RegisterExecutionProviderLibrary(env, "npurt", argv[1]), "RegisterExecutionProviderLibrary"))
        goto done;
    registered = 1;

    /* The devices the library offers, among every EP's. */
    const OrtEpDevice *const *all = NULL;
    size_t n_all = 0;
    if (failed(ort->GetEpDevices(env, &all, &n_all), "GetEpDevices")) goto done;
    const OrtEpDevice *mine[8];
    size_t n_mine = 0;
    for (size_t i = 0; i < n_all && n_mine < 8; i++) {
        if (strcmp(ort->EpDevice_EpName(all[i]), EP_NAME) == 0) {
            printf("device %zu: %s (vendor %s)\n", n_mine, ort->EpDevice_EpName(all[i]),
                   ort->EpDevice_EpVendor(all[i]));
            mine[n_mine++] = all[i];
        }
    }
    if (n_mine == 0) {
        fprintf(stderr, "%s offers no device\n", EP_NAME);
        goto done;
    }

    if (failed(ort->CreateSessionOptions(&options), "CreateSessionOptions")) goto done;
    if (failed(ort->SessionOptionsAppendExecutionProvider_V2(options, env, mine, n_mine, keys, values, n_options),
               "SessionOptionsAppendExecutionProvider_V2"))
        goto done;
    if (failed(ort->AddSessionConfigEntry(options, "session.disable_cpu_ep_fallback", "1"),
               "AddSessionConfigEntry"))
        goto done;
    if (failed(ort->CreateSession(env, argv[2], options, &session), "CreateSession")) goto done;

    float x[8];
    for (int i = 0; i < 8; i++) x[i] = ((float)i - 3.5f) / 2.0f;
    const int64_t shape[2] = {2, 4};
    if (failed(ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &memory), "CreateCpuMemoryInfo"))
        goto done;
    if (failed(ort->CreateTensorWithDataAsOrtValue(memory, x, sizeof x, shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                                                   &input),
               "CreateTensorWithDataAsOrtValue"))
        goto done;

    const char *input_names[1] = {"x"};
    const char *output_names[1] = {"y"};
    const OrtValue *inputs[1] = {input};
    if (failed(ort->Run(session, NULL, input_names, inputs, 1, output_names, 1, &output), "Run")) goto done;
    float *y = NULL;
    if (failed(ort->GetTensorMutableData(output, (void **)&y), "GetTensorMutableData")) goto done;
    /* The model's output is [2, N]; this example's models have N = 3. */
    for (int i = 0; i < 6; i++) printf("y[%d] = %.9g\n", i, y[i]);
    rc = 0;

done:
    /* Sessions go before the library that computes them is unregistered. */
    ort->ReleaseValue(output);
    ort->ReleaseValue(input);
    ort->ReleaseMemoryInfo(memory);
    ort->ReleaseSession(session);
    ort->ReleaseSessionOptions(options);
    if (registered) rc |= failed(ort->UnregisterExecutionProviderLibrary(env, "npurt"), "UnregisterExecutionProviderLibrary");
    ort->ReleaseEnv(env);
    for (size_t i = 0; i < n_options; i++) free(copies[i]);
    return rc;
}
