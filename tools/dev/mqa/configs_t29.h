// Session 30, second call: the persistent grid with its ring numbered across the block's tokens and each token's tile t still
// taken by warpgroup t % 2 (perr: MJ_MQA90T_RING=1; perrm: with MJ_MQA90T_MERGE=1), against session 29's committed form (per:
// tile t in slot t % 2, RING=0) and one block a token. Format: configs.h.
#define MQA_CONFIGS(X)                                  \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tper_pre, 16, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16sm90tperr_pre, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tperrm_pre, 16, 64, 2, -1, -1, -1, 0, 0)   \
    X(h16sm90tperrg4_pre, 16, 64, 2, -1, -1, -1, 4, 0)
