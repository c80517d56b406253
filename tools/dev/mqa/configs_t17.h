// A block's fixed cost (session 24): the Q load, the key-set build and the epilogue alone (DEV_SKIP 5: no tiles; 6: no
// tiles and no key-set build), beside the whole kernel, its gather alone and its math alone, for the 16-head keys-as-M
// kernel and the 64-head kernel (128 heads). Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90tmo, 16, 64, 2, -1, -1, -1, 3, 0)      \
    X(h16sm90tz5, 16, 64, 2, -1, -1, -1, 5, 0)      \
    X(h16sm90tz6, 16, 64, 2, -1, -1, -1, 6, 0)      \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90go, 64, 64, 2, -1, -1, -1, 1, 0)       \
    X(h64sm90mo, 64, 64, 2, -1, -1, -1, 3, 0)       \
    X(h64sm90z5, 64, 64, 2, -1, -1, -1, 5, 0)       \
    X(h64sm90z6, 64, 64, 2, -1, -1, -1, 6, 0)
