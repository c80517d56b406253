// Configs the harness links: X(tag, BLOCK_H, BLOCK_N, STAGES, KSPLIT, MINB, PINGPONG, DEV_SKIP, KV_FP8).
// build.sh compiles kernel_cfg.cu once per line of this list (it parses this file). KSPLIT / MINB /
// PINGPONG -1 = the kernel's default (what the runtime gets). DEV_SKIP != 0 builds a timing-only variant
// without the P V (1) or S (2) mma: the harness times it and does not check it.
// Tags containing "sm90" build kernel_cfg90.cu (the Hopper tier, 64 x 64 x 2 only) instead; there PINGPONG
// is MJ_MQA90_OVERLAP (read by schedule 0 only: "sm90o" tags build it, build.sh; the default schedule 1
// ignores it), DEV_SKIP 1 drops every wgmma, 3 the gather. KV_FP8 1 reads the FP8 latent cache (paged cases only).
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)            \
    X(h64sm90ls, 64, 64, 2, -1, -1, 0, 0, 0)           \
    X(h64sm90skip, 64, 64, 2, -1, -1, -1, 1, 0)        \
    X(h64n64s2, 64, 64, 2, -1, -1, -1, 0, 0)           \
    X(h64n64s2ls, 64, 64, 2, -1, -1, 0, 0, 0)          \
    X(h64n64s2nt, 64, 64, 2, -1, -1, 1, 0, 0)          \
    X(h64n32s3, 64, 32, 3, -1, -1, -1, 0, 0)           \
    X(h64n32s2, 64, 32, 2, -1, -1, -1, 0, 0)           \
    X(h32n64s2, 32, 64, 2, -1, -1, -1, 0, 0)           \
    X(h32n32s2, 32, 32, 2, -1, -1, -1, 0, 0)           \
    X(h16n64s2, 16, 64, 2, -1, -1, -1, 0, 0)           \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)           \
    X(h16n32s3, 16, 32, 3, -1, -1, -1, 0, 0)           \
    X(h16n32s4, 16, 32, 4, -1, -1, -1, 0, 0)          \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)         \
    X(h64n32s2f8, 64, 32, 2, -1, -1, -1, 0, 1)        \
    X(h32n64s2f8, 32, 64, 2, -1, -1, -1, 0, 1)        \
    X(h32n32s2f8, 32, 32, 2, -1, -1, -1, 0, 1)        \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)        \
    X(h16n32s3f8, 16, 32, 3, -1, -1, -1, 0, 1)
