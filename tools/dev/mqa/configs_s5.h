// Task S5's config list (build.sh CFG_FILE=configs_s5.h): the bf16 Hopper kernel on schedule 1 (the default) and on
// schedule 2 ("w2": tile pairs, S of the two tiles on the two warpgroups, slots released in halves), each also with
// the gather left out (DEV_SKIP 3: the math alone) and schedule 2 with every wgmma left out (DEV_SKIP 1: its
// producer order and barriers alone); (the L2 prefetch / evict_last variants "w2pf", "w2pe" measured in the first run are removed); "w2e": warpgroup 0 hands P of E over while its own P V of E runs. Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)     \
    X(h64sm90w2, 64, 64, 2, -1, -1, -1, 0, 0)   \
    X(h64sm90mo, 64, 64, 2, -1, -1, -1, 3, 0)   \
    X(h64sm90w2mo, 64, 64, 2, -1, -1, -1, 3, 0) \
    X(h64sm90w2go, 64, 64, 2, -1, -1, -1, 1, 0) \
    X(h64sm90w2e, 64, 64, 2, -1, -1, -1, 0, 0)
