/* The few CUDA driver calls the examples need to own device memory, loaded with dlopen the way libmlajit
 * loads the driver: the examples build with no CUDA toolkit and run, skipping the GPU part, on machines
 * without a GPU. An application that already has a CUDA context (the runtime API, PyTorch) needs none of
 * this: mlajit_create(-1, ...) uses the caller's current context. Usable from C and C++. */
#ifndef MLAJIT_EXAMPLES_CUDA_DRIVER_H
#define MLAJIT_EXAMPLES_CUDA_DRIVER_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

typedef unsigned long long example_devptr; /* CUdeviceptr on 64-bit platforms */

typedef struct example_cuda {
    void* lib;
    int (*cuInit)(unsigned);
    int (*cuDeviceGetCount)(int*);
    int (*cuDeviceGet)(int*, int);
    int (*cuDevicePrimaryCtxRetain)(void**, int);
    int (*cuCtxSetCurrent)(void*);
    int (*cuCtxSynchronize)(void);
    int (*cuMemAlloc)(example_devptr*, size_t);
    int (*cuMemFree)(example_devptr);
    int (*cuMemcpyHtoD)(example_devptr, const void*, size_t);
    int (*cuMemcpyDtoH)(void*, example_devptr, size_t);
    int (*cuMemsetD8)(example_devptr, unsigned char, size_t);
} example_cuda;

/* POSIX sanctions reading a dlsym result into a function pointer through its object representation. */
#define EXAMPLE_CUDA_SYM(cu, field, name)                                \
    do {                                                                 \
        void* sym_ = dlsym((cu)->lib, name);                             \
        if (!sym_) {                                                     \
            snprintf(why, why_len, "libcuda.so.1 lacks %s", name);       \
            return 0;                                                    \
        }                                                                \
        *(void**)(&(cu)->field) = sym_;                                  \
    } while (0)

/* Loads the driver and makes device 0's primary context current. Returns 1 on success, else 0 with the
 * reason in why (no driver, no GPU, ...). */
static int example_cuda_open(example_cuda* cu, char* why, size_t why_len) {
    int n = 0, dev = 0, rc;
    void* ctx = NULL;
    cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu->lib) {
        snprintf(why, why_len, "no CUDA driver (libcuda.so.1 not loadable)");
        return 0;
    }
    EXAMPLE_CUDA_SYM(cu, cuInit, "cuInit");
    EXAMPLE_CUDA_SYM(cu, cuDeviceGetCount, "cuDeviceGetCount");
    EXAMPLE_CUDA_SYM(cu, cuDeviceGet, "cuDeviceGet");
    EXAMPLE_CUDA_SYM(cu, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    EXAMPLE_CUDA_SYM(cu, cuCtxSetCurrent, "cuCtxSetCurrent");
    EXAMPLE_CUDA_SYM(cu, cuCtxSynchronize, "cuCtxSynchronize");
    EXAMPLE_CUDA_SYM(cu, cuMemAlloc, "cuMemAlloc_v2");
    EXAMPLE_CUDA_SYM(cu, cuMemFree, "cuMemFree_v2");
    EXAMPLE_CUDA_SYM(cu, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    EXAMPLE_CUDA_SYM(cu, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    EXAMPLE_CUDA_SYM(cu, cuMemsetD8, "cuMemsetD8_v2");
    if ((rc = cu->cuInit(0)) != 0) {
        snprintf(why, why_len, "cuInit failed (CUresult %d): no usable GPU", rc);
        return 0;
    }
    if (cu->cuDeviceGetCount(&n) != 0 || n == 0) {
        snprintf(why, why_len, "no CUDA device");
        return 0;
    }
    if ((rc = cu->cuDeviceGet(&dev, 0)) != 0 || (rc = cu->cuDevicePrimaryCtxRetain(&ctx, dev)) != 0 ||
        (rc = cu->cuCtxSetCurrent(ctx)) != 0) {
        snprintf(why, why_len, "cannot make device 0's context current (CUresult %d)", rc);
        return 0;
    }
    return 1;
}

/* bf16 <-> float on the host (round to nearest even; inputs here are finite). */
static unsigned short example_to_bf16(float f) {
    union { float f; unsigned u; } v;
    v.f = f;
    v.u += 0x7FFFu + ((v.u >> 16) & 1u);
    return (unsigned short)(v.u >> 16);
}
static float example_from_bf16(unsigned short h) {
    union { float f; unsigned u; } v;
    v.u = (unsigned)h << 16;
    return v.f;
}

#endif
