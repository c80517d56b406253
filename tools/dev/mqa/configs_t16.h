// The Hopper producers' row lookups a tile ahead ("ra1": development switch MJ_MQA_ROW_AHEAD 1) against in place (the
// shipped form), for the 16-head keys-as-M kernel and the 64-head kernel, whole and gather alone (DEV_SKIP 4 / 1). Built in
// session 23, not run (its device time ran out). Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tra1, 16, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90tg4ra1, 16, 64, 2, -1, -1, -1, 4, 0)   \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90ra1, 64, 64, 2, -1, -1, -1, 0, 0)      \
    X(h64sm90go, 64, 64, 2, -1, -1, -1, 1, 0)       \
    X(h64sm90gora1, 64, 64, 2, -1, -1, -1, 1, 0)
