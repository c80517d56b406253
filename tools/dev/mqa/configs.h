// Configs the harness links (tag, BLOCK_H, BLOCK_N, STAGES, KSPLIT, MINB). build.sh compiles
// kernel_cfg.cu once per line of the same list (it parses this file). KSPLIT / MINB 0 = the kernel's default.
#define MQA_CONFIGS(X)                \
    X(h64n64s2, 64, 64, 2, 0, 0)      \
    X(h64n64s2k1, 64, 64, 2, 1, 0)    \
    X(h64n32s3, 64, 32, 3, 0, 0)      \
    X(h64n32s2, 64, 32, 2, 0, 0)      \
    X(h32n64s2, 32, 64, 2, 0, 0)      \
    X(h32n32s2, 32, 32, 2, 0, 0)      \
    X(h16n64s2, 16, 64, 2, 0, 0)      \
    X(h16n32s2, 16, 32, 2, 0, 0)      \
    X(h16n32s3, 16, 32, 3, 0, 0)      \
    X(h16n32s4, 16, 32, 4, 0, 0)
