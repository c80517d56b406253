// Task S3's short config list (build.sh CFG_FILE=configs_s3.h): the Hopper bf16 kernel (schedule 1: one
// warpgroup computes S), "o" tags the old schedule 0 (both warpgroups split S), "pr" the CTA pair sharing each
// gathered tile; timing-only variants (DEV_SKIP 1: no wgmma, 3: no gather); the FP8 Hopper kernel; the
// portable 16 x 32 tiles. Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90o, 64, 64, 2, -1, -1, -1, 0, 0)        \
    X(h64sm90pr, 64, 64, 2, -1, -1, -1, 0, 0)       \
    X(h64sm90prskip, 64, 64, 2, -1, -1, -1, 1, 0)   \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)        \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)       \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)
