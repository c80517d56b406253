// Session 25, second call: the FP8 producer as shipped (8 warps of 8 rows, 512 threads) against the bf16 kernel and the
// portable FP8 tile, checks on every case. Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90t8, 16, 64, 2, -1, -1, -1, 0, 1)       \
    X(h16sm90t8g4, 16, 64, 2, -1, -1, -1, 4, 1)     \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)
