// Next session (issue 16, prepared in session 26, not yet run): what limits the FP8 keys-as-M kernel once the pre-pass has
// taken the set build away: the shipped raw ring with the list (t8), its producer alone (g4), its codes stored unconverted
// (raw: DEV_SKIP 2), without wgmma (k1: DEV_SKIP 1), session 25's register producer (s0: MJ_MQA90T8_STAGE=0), and the bf16
// kernel, all with the pre-pass (_pre). Racecheck tries on the bf16 kernel's epilogue (MJ_MQA90T_EPI_TRY, session 27): no tiles (z5),
// warps reconverged before its barriers (e1), its barriers on ids of their own (e2), both warpgroups passing as many
// barriers (e3): measured in session 28 (e3 and z5 clean), e3 is now the kernel's code and the switch is gone. Added in session 28: the 64-head kernel's schedule 2 (tile pairs, w2; w2e hands P of E over early)
// against schedule 1 with the list (session 19 measured schedule 2 slower without it: its gather with half-slot barriers
// alone took 8.66 ms against 7.60, while the producer still looked rows up), whole, math alone (mo) and gather alone (go).
// The keys-as-M kernel's persistent grid (per: the spec's PERSIST, CFG_PERSIST here; session 28), whole and gather alone (g4) against the
// one-block-a-token form. Format: configs.h.
#define MQA_CONFIGS(X)                                  \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90t8_pre, 16, 64, 2, -1, -1, -1, 0, 1)       \
    X(h16sm90t8g4_pre, 16, 64, 2, -1, -1, -1, 4, 1)     \
    X(h16sm90t8raw_pre, 16, 64, 2, -1, -1, -1, 2, 1)    \
    X(h16sm90t8k1_pre, 16, 64, 2, -1, -1, -1, 1, 1)     \
    X(h16sm90t8s0_pre, 16, 64, 2, -1, -1, -1, 0, 1)     \
    X(h16sm90tz5_pre, 16, 64, 2, -1, -1, -1, 5, 0)      \
    X(h16sm90tper_pre, 16, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16sm90tg4_pre, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90tperg4_pre, 16, 64, 2, -1, -1, -1, 4, 0)   \
    X(h64sm90_pre, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90mo_pre, 64, 64, 2, -1, -1, -1, 3, 0)       \
    X(h64sm90go_pre, 64, 64, 2, -1, -1, -1, 1, 0)       \
    X(h64sm90w2_pre, 64, 64, 2, -1, -1, -1, 0, 0)       \
    X(h64sm90w2e_pre, 64, 64, 2, -1, -1, -1, 0, 0)      \
    X(h64sm90w2mo_pre, 64, 64, 2, -1, -1, -1, 3, 0)     \
    X(h64sm90w2go_pre, 64, 64, 2, -1, -1, -1, 1, 0)
