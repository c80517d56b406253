// Task S3's racecheck follow-up (build.sh CFG_FILE=configs_s3b.h): schedule 1 as shipped, with bar.sync for the
// P hand-over ("ps"), and schedule 0 ("o"). Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90ps, 64, 64, 2, -1, -1, -1, 0, 0)       \
    X(h64sm90o, 64, 64, 2, -1, -1, -1, 0, 0)
