// Session 25: the keys-as-M kernel on the FP8 cache with the dequantizing producer (sparse_mqa/sm90_f8_producer.cuh, the
// bf16 math on bf16(e4m3 * scale) tiles), against the bf16 kernel, the scale-folding FP8 body (sm90t8f, 4 slots), and the
// portable FP8 16 x 32 tile the runtime picks today; at 32 heads also the 64-head kernels (bf16, FP8) the runtime picks there. Timing forms: g4 = the producer alone (DEV_SKIP 4), raw = codes
// stored unconverted (DEV_SKIP 2); u = the integer unpack (MJ_FP8_UNPACK 1); w = 8 producer
// warps of 8 rows (MJ_MQA90T8_PW8, a switch then; the FP8 producer is always 8 warps since, so these tags now build the
// shipped form and h16sm90t8 no longer builds the 4-warp one that call 1 measured). Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90t8, 16, 64, 2, -1, -1, -1, 0, 1)       \
    X(h16sm90t8g4, 16, 64, 2, -1, -1, -1, 4, 1)     \
    X(h16sm90t8raw, 16, 64, 2, -1, -1, -1, 2, 1)    \
    X(h16sm90t8u, 16, 64, 2, -1, -1, -1, 0, 1)      \
    X(h16sm90t8w, 16, 64, 2, -1, -1, -1, 0, 1)      \
    X(h16sm90t8wg4, 16, 64, 2, -1, -1, -1, 4, 1)    \
    X(h16sm90t8f, 16, 64, 4, -1, -1, -1, 0, 1)      \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)      \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)        \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)
