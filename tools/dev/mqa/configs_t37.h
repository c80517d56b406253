// Session 37: where the 64-head kernel's warps wait (ncu per-instruction stall samples, SourceCounters) in schedule 1 (the
// runtime's) and schedule 2 (tile pairs, FlashMLA's order), whole and math alone (mo), at 128 heads, 8k paged, with the
// pre-pass's list; and the 64-head kernel's persistent grid (per: the spec's PERSIST, CFG_PERSIST here; sm90_persist.cuh). Session 28 (H100): whole 8.15 / 8.65 ms, math alone 6.91 / 5.95, gather alone 6.26 / 6.18: schedule 2 has
// the faster parts and the slower whole. Format: configs.h.
#define MQA_CONFIGS(X)                                  \
    X(h64sm90_pre, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90mo_pre, 64, 64, 2, -1, -1, -1, 3, 0)       \
    X(h64sm90go_pre, 64, 64, 2, -1, -1, -1, 1, 0)       \
    X(h64sm90w2_pre, 64, 64, 2, -1, -1, -1, 0, 0)       \
    X(h64sm90w2mo_pre, 64, 64, 2, -1, -1, -1, 3, 0)     \
    X(h64sm90w2go_pre, 64, 64, 2, -1, -1, -1, 1, 0)     \
    X(h64sm90per_pre, 64, 64, 2, -1, -1, -1, 0, 0)
