// The FP8-cache work's short config list (build.sh CFG_FILE=configs_fp8.h): the runtime's bf16 kernels on
// the H200 (Hopper tier above 16 heads, 16 x 32 at 16) and every FP8 specialization. Format: configs.h.
// Tags with "f8i" build the integer unpack (MJ_FP8_UNPACK=1); DEV_SKIP 1 / 2 on the Hopper FP8 kernel: no
// wgmma / codes stored unconverted (timing only).
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)        \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)       \
    X(h64sm90f8i, 64, 64, 2, -1, -1, -1, 0, 1)      \
    X(h64sm90f8nc, 64, 64, 2, -1, -1, -1, 2, 1)     \
    X(h64sm90f8sk, 64, 64, 2, -1, -1, -1, 1, 1)     \
    X(h64n32s2f8, 64, 32, 2, -1, -1, -1, 0, 1)      \
    X(h32n64s2f8, 32, 64, 2, -1, -1, -1, 0, 1)      \
    X(h32n32s2f8, 32, 32, 2, -1, -1, -1, 0, 1)      \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)      \
    X(h16n32s2f8i, 16, 32, 2, -1, -1, -1, 0, 1)     \
    X(h16n32s3f8, 16, 32, 3, -1, -1, -1, 0, 1)
