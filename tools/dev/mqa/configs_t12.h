// Session 21's fifth call (build.sh CFG_FILE=configs_t12.h): both keys-as-M bodies after their epilogue moved into
// sparse_mqa/sm90_t_common.cuh: checks of every case (the FP8 body's lse / max_logits still fail by design). Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h32sm90t, 32, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90t8, 16, 64, 4, -1, -1, -1, 0, 1)
