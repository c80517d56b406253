// The harness's persistent-grid launches (kernel_cfg90.cu, kernel_cfg90t.cu): how many blocks at most, the device's SM
// count or MQA_PERSIST_BLOCKS where set (fewer, so that the small check cases give a block several tokens or items).
#pragma once
#include <cuda_runtime.h>
#include <cstdlib>

// Writes the limit to `blocks` (read once a process, then kept in the caller's static).
inline cudaError_t persist_blocks(int& blocks) {
    if (blocks != 0) return cudaSuccess;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    if (const char* env = getenv("MQA_PERSIST_BLOCKS")) blocks = atoi(env) > 0 ? atoi(env) : blocks;
    return cudaSuccess;
}
