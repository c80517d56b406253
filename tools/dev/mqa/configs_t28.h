// Ran in session 30 (docs/PERF.md "Session 30"); per2 / per2m (MJ_MQA90T_STREAMS=2) were removed after it: rebuild at 5a4e269.
// Session 30: the persistent grid's two development switches against the committed persistent form (per) and one block a
// token, 16 heads: per2 (MJ_MQA90T_STREAMS=2: producer warps 0-1 gather the even tiles into slot 0, warps 2-3 the odd ones into
// slot 1), perm (MJ_MQA90T_MERGE=1: warpgroup 1 hands its unscaled O^T, maxima and sums over at a token's end and goes on,
// warpgroup 0 merges and stores alone), per2m (both). Whole, and gather alone (g4) for the producer forms. Format: configs.h.
#define MQA_CONFIGS(X)                                  \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tper_pre, 16, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16sm90tper2_pre, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tperm_pre, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tper2m_pre, 16, 64, 2, -1, -1, -1, 0, 0)   \
    X(h16sm90tg4_pre, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90tperg4_pre, 16, 64, 2, -1, -1, -1, 4, 0)   \
    X(h16sm90tper2g4_pre, 16, 64, 2, -1, -1, -1, 4, 0)
