// The key-set pre-pass specializations (kernels_src/sparse_mqa/compact.cuh) the harness links: threads, the widest row
// (MJ_COMPACT_MAXW), FP8 cache. build.sh builds one compact_cfg.cu object per line; the harness runs a config whose tag
// ends in "_pre" with the pre-pass first (--compact-threads picks the thread count; the narrowest width class that holds
// the row is used).
#define MQA_COMPACT_VARIANTS(X) \
    X(128, 2048, 0)             \
    X(256, 2048, 0)             \
    X(512, 2048, 0)             \
    X(256, 8192, 0)             \
    X(512, 8192, 0)             \
    X(128, 2048, 1)             \
    X(256, 2048, 1)             \
    X(512, 2048, 1)             \
    X(256, 8192, 1)             \
    X(512, 8192, 1)
