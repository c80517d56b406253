// Session 29 (prepared, not yet run): the persistent grid's producer in two streams (per2: MJ_MQA90T_STREAMS=2, warps 0-1
// gather the even tiles into slot 0, warps 2-3 the odd tiles into slot 1) against the committed persistent form (per: one
// stream, every tile in order) and the one-block-a-token form, whole and gather alone (g4). Session 29 measured per at 2.998 ms
// against 3.091 (H100, 8k, 16 heads), its gather alone 2.504 against 2.697: the warpgroups' alternation, not the gather, holds it
// back. Format: configs.h.
#define MQA_CONFIGS(X)                                  \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tper_pre, 16, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16sm90tper2_pre, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tg4_pre, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90tperg4_pre, 16, 64, 2, -1, -1, -1, 4, 0)   \
    X(h16sm90tper2g4_pre, 16, 64, 2, -1, -1, -1, 4, 0)
