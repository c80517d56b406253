// Throughput of the FP8 cache's dequantization steps on one GPU (issue 16): how many e4m3 values an SM turns into
// bf16(float(e4m3) * scale) per clock, by the conversion-unit sequence the kernels use (sparse_mqa/fp8.cuh dequant16,
// hardware cvt) and by the integer unpack, and the rate of each instruction alone. Every thread runs 8 independent
// chains (ILP) in a loop; WARPS warps a block, one block an SM (grid = SMs), so the rate is per SM at that occupancy.
// Build: nvcc -O3 -arch=sm_90a -std=c++17 -I kernels_src -o tools/dev/cvtbench/build/cvtbench tools/dev/cvtbench/cvtbench.cu
// Run: cvtbench   (prints one line per form and occupancy: values or instructions per clock per SM)
#include <cstdio>
#include <cuda_runtime.h>
#include "mlajit_device.cuh"
#include "sparse_mqa/fp8.cuh"

constexpr int kIters = 4096;

// form 0: dequant16 hardware; 1: integer unpack (fast path: scale < 256, no NaN codes); 2: cvt e4m3x2 -> f16x2 alone;
// 3: cvt f32 <- f16 alone; 4: cvt bf16x2 <- f32 x2 alone; 5: fmul alone. Counts: values (0, 1) or instructions.
template <int FORM>
__global__ void bench(unsigned seed, float scale, unsigned* sink, long long* cycles) {
    mj_u32 in[8][4];
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int k = 0; k < 4; ++k) in[c][k] = (seed * (threadIdx.x + 7 * c + 13 * k + 1)) & 0x77777777u;
    mj_u32 acc = 0;
    float facc[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) facc[c] = __uint_as_float(in[c][0] & 0x3f7fffffu);
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < kIters; ++it) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            if constexpr (FORM == 0 || FORM == 1) {
                mj_u32 o[8];
                if constexpr (FORM == 0) {
                    mj_fp8::dequant16<90>(in[c], scale, o);
                } else {  // the integer unpack's fast path (sparse_mqa/fp8.cuh, MJ_FP8_UNPACK 1)
                    const float s = scale * 0x1p120f;
#pragma unroll
                    for (int w = 0; w < 4; ++w) {
                        float f0 = mj_fp8::mul_keep_subnormals(mj_fp8::e4m3_scaled_bits<0>(in[c][w]), s);
                        float f1 = mj_fp8::mul_keep_subnormals(mj_fp8::e4m3_scaled_bits<1>(in[c][w]), s);
                        float f2 = mj_fp8::mul_keep_subnormals(mj_fp8::e4m3_scaled_bits<2>(in[c][w]), s);
                        float f3 = mj_fp8::mul_keep_subnormals(mj_fp8::e4m3_scaled_bits<3>(in[c][w]), s);
                        o[2 * w] = mj_pack_bf16x2(f0, f1);
                        o[2 * w + 1] = mj_pack_bf16x2(f2, f3);
                    }
                }
                // feed back so nothing is hoisted: the next iteration's codes depend on this one's output
#pragma unroll
                for (int k = 0; k < 4; ++k) in[c][k] ^= (o[2 * k] ^ o[2 * k + 1]) & 0x01010101u;
            } else if constexpr (FORM == 2) {
                mj_u32 h;
                asm volatile("{\n .reg .b16 a;\n cvt.u16.u32 a, %1;\n cvt.rn.f16x2.e4m3x2 %0, a;\n}" : "=r"(h) : "r"(in[c][0]));
                in[c][0] ^= h & 1u;
            } else if constexpr (FORM == 3) {
                float f;
                asm volatile("{\n .reg .b16 a;\n cvt.u16.u32 a, %1;\n cvt.f32.f16 %0, a;\n}" : "=f"(f) : "r"(in[c][0]));
                in[c][0] ^= __float_as_uint(f) & 1u;
            } else if constexpr (FORM == 4) {
                in[c][0] ^= mj_pack_bf16x2(facc[c], __uint_as_float(in[c][0])) & 1u;
            } else {
                facc[c] = mj_fp8::mul_keep_subnormals(facc[c], scale);
            }
        }
    }
    const long long t1 = clock64();
#pragma unroll
    for (int c = 0; c < 8; ++c) acc ^= in[c][0] ^ in[c][1] ^ in[c][2] ^ in[c][3] ^ __float_as_uint(facc[c]);
    if (acc == 0x12345678u) sink[threadIdx.x] = acc;
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int FORM>
void run(const char* name, int per_iter, int sms, unsigned* sink, long long* cyc) {
    for (int warps : {4, 8, 16, 32}) {
        bench<FORM><<<sms, warps * 32>>>(12345u, 0.0123f, sink, cyc);
        cudaDeviceSynchronize();
        long long c = 0;
        cudaMemcpy(&c, cyc, sizeof(c), cudaMemcpyDeviceToHost);
        const double work = (double)warps * 32 * kIters * 8 * per_iter;
        printf("%-34s warps/SM %2d: %8.1f a clock a SM (%lld cycles)\n", name, warps, work / (double)c, c);
    }
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    unsigned* sink;
    long long* cyc;
    cudaMalloc(&sink, 4096);
    cudaMalloc(&cyc, sizeof(long long) * sms);
    run<0>("dequant16, hardware cvt (values)", 16, sms, sink, cyc);
    run<1>("dequant16, integer unpack (values)", 16, sms, sink, cyc);
    run<2>("cvt.rn.f16x2.e4m3x2 (instr)", 1, sms, sink, cyc);
    run<3>("cvt.f32.f16 (instr)", 1, sms, sink, cyc);
    run<4>("cvt.rn.bf16x2.f32 (instr)", 1, sms, sink, cyc);
    run<5>("mul.rn.f32 (instr)", 1, sms, sink, cyc);
    printf("%s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
