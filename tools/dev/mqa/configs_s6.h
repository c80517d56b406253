// Session 19's config list (build.sh CFG_FILE=configs_s6.h): schedule 1 (the runtime's) and schedule 2 ("w2"; "w2e":
// P of E handed over during its own P V) after schedule 2's racecheck mends, each with the math alone (DEV_SKIP 3,
// "mo") and the gather alone (DEV_SKIP 1, "go"), so the two schedules' parts are timed in one run. Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)     \
    X(h64sm90w2, 64, 64, 2, -1, -1, -1, 0, 0)   \
    X(h64sm90w2e, 64, 64, 2, -1, -1, -1, 0, 0)  \
    X(h64sm90mo, 64, 64, 2, -1, -1, -1, 3, 0)   \
    X(h64sm90go, 64, 64, 2, -1, -1, -1, 1, 0)   \
    X(h64sm90w2mo, 64, 64, 2, -1, -1, -1, 3, 0) \
    X(h64sm90w2go, 64, 64, 2, -1, -1, -1, 1, 0)
