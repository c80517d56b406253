// The key-set pre-pass (issue 13, session 25): each Hopper kernel and the portable 16-head tile with and without
// kernels_src/sparse_mqa/compact.cuh before it ("_pre": the kernel reads the pre-pass's list instead of building the set;
// the harness checks the list and that the outputs are bit-identical to the config without it). bf16 timed at 16 heads
// (keys as M) and 128 heads (64-head kernel); the FP8 kernels for the checks. Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90_pre, 64, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)        \
    X(h16n32s2_pre, 16, 32, 2, -1, -1, -1, 0, 0)    \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)       \
    X(h64sm90f8_pre, 64, 64, 2, -1, -1, -1, 0, 1)   \
    X(h16sm90t8, 16, 64, 2, -1, -1, -1, 0, 1)       \
    X(h16sm90t8_pre, 16, 64, 2, -1, -1, -1, 0, 1)   \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)      \
    X(h16n32s2f8_pre, 16, 32, 2, -1, -1, -1, 0, 1)
