// Session 32: why the ring + merge form (perrm, the runtime's persistent form since session 32) gains 8 % in the harness but
// ~1 % through the library. The runtime compiles without --use_fast_math, the harness with it: the "nf" configs are the same
// kernels built as the runtime builds them (build.sh). The one-block form of each build is the base its persistent forms'
// bits are compared with (harness.cu base_tag). Format: configs.h.
#define MQA_CONFIGS(X)                                  \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tper_pre, 16, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16sm90tperrm_pre, 16, 64, 2, -1, -1, -1, 0, 0)   \
    X(h16sm90tnf_pre, 16, 64, 2, -1, -1, -1, 0, 0)      \
    X(h16sm90tpernf_pre, 16, 64, 2, -1, -1, -1, 0, 0)   \
    X(h16sm90tperrmnf_pre, 16, 64, 2, -1, -1, -1, 0, 0)
