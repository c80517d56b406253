// Session 31, second call: the ring with warpgroup 0 merging alone (perrm: MJ_MQA90T_RING=1, MJ_MQA90T_MERGE=1) after its fix
// (the ring's slots alternate two full barriers a slot, sm90_t_persist.cuh full_bars), against the committed persistent form
// (per), the ring alone (perr) and one block a token. Format: configs.h.
#define MQA_CONFIGS(X)                                  \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tper_pre, 16, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16sm90tperr_pre, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tperrm_pre, 16, 64, 2, -1, -1, -1, 0, 0)
