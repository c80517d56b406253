// Session 20's config list (build.sh CFG_FILE=configs_t1.h): the keys-as-M Hopper kernel for 16 and 32 heads
// (sparse_mqa/sm90_t.cuh, "sm90t"), its math alone ("mo", DEV_SKIP 3) and gather alone ("go", DEV_SKIP 1), "tpin":
// O^T's rescale pinned before the wgmma fence; beside them the 64-head Hopper kernel (which pads 16 / 32 heads to 64) and the portable 16 x 32 tile.
// Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h32sm90t, 32, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tmo, 16, 64, 2, -1, -1, -1, 3, 0)  \
    X(h16sm90tgo, 16, 64, 2, -1, -1, -1, 1, 0)  \
    X(h32sm90tmo, 32, 64, 2, -1, -1, -1, 3, 0)  \
    X(h16sm90tpin, 16, 64, 2, -1, -1, -1, 0, 0) \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)     \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)
// Session 20's second call also had h16sm90t56 (16, 56, 3), h32sm90t48 (32, 48, 3) and h16sm90t56mo: 56- and 48-key
// tiles in 3 slots, measured slower and dropped (docs/perf_mqa_notes.md); its third call h16sm90tb0 (the epilogue's
// barriers as __syncthreads, switch MJ_MQA90T_EPI_SYNC0, a racecheck experiment: still reported), removed after it.
