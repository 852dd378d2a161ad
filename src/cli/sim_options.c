/* `kvrouter sim` flags as an option table (sim_options.h). A new flag is a
 * field in sim_settings (or kvr_sim_config) plus one row here. */
#include "cli/sim_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/options.h"

#define S(field) offsetof(sim_settings, field)
#define ROWF(nm, ty, field, lo, hi, meta, hlp, fl, ...)                                      \
    {.name = nm, .type = ty, .offset = S(field), .min = lo, .max = hi, .metavar = meta,     \
     .help = hlp, .flags = fl, __VA_ARGS__}
#define ROW(nm, ty, field, lo, hi, meta, hlp, ...)                                           \
    ROWF(nm, ty, field, lo, hi, meta, hlp, KVR_OPT_NO_CONFIG, __VA_ARGS__)
#define FLAG(nm, field, hlp)                                                                 \
    ROWF(nm, KVR_OPT_BOOL, field, 0, 1, NULL, hlp, KVR_OPT_NO_CONFIG | KVR_OPT_NO_VALUE)
#define CUSTOM(nm, meta, hlp, fn, ...)                                                      \
    {.name = nm, .type = KVR_OPT_CUSTOM, .metavar = meta, .help = hlp, .set_text = fn,      \
     .flags = KVR_OPT_NO_CONFIG, __VA_ARGS__}

static const char *const wires[] = {"sglang", "vllm", NULL}; /* kvr_wire_style order */

static int fail(const kvr_option *o, char *err, size_t cap, const char *what, const char *got)
{
    char label[64];
    snprintf(err, cap, "%s %s, got '%s'", kvr_opt_label(o, true, NULL, label, sizeof label), what,
             got);
    return -1;
}

static int set_policies(const kvr_option *o, void *target, const char *t, char *err, size_t cap)
{
    sim_settings *s = target;
    bool which[KVR_SIM_POLICY_COUNT] = {false};
    char copy[256];
    if (strlen(t) >= sizeof copy)
        return fail(o, err, cap, "is too long", t);
    strcpy(copy, t);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int p = kvr_sim_policy_from_name(tok);
        if (p < 0)
            return fail(o, err, cap, "names an unknown policy", tok);
        which[p] = true;
    }
    memcpy(s->which, which, sizeof which);
    return 0;
}

/* The name is spliced into the JSON bodies sent to the router. */
static int set_model(const kvr_option *o, void *target, const char *t, char *err, size_t cap)
{
    bool plain = *t && strlen(t) < 256 && !strpbrk(t, "\"\\");
    for (const char *c = t; plain && *c; c++)
        plain = (unsigned char)*c >= 0x20;
    if (!plain)
        return fail(o, err, cap, "takes 1-255 printable characters without '\"' or '\\'", t);
    ((sim_settings *)target)->cfg.model_name = t;
    return 0;
}

static int set_route_opt(const kvr_option *o, void *target, const char *t, char *err, size_t cap)
{
    sim_settings *s = target;
    const char *eq = strchr(t, '=');
    char *end;
    if (!eq || eq == t || (strtod(eq + 1, &end), end == eq + 1 || *end))
        return fail(o, err, cap, "expects key=number", t);
    size_t room = sizeof s->route_extra - s->extra_len;
    int m = snprintf(s->route_extra + s->extra_len, room, "%s\"%.*s\":%s", s->extra_len ? "," : "",
                     (int)(eq - t), t, eq + 1);
    if (m < 0 || (size_t)m >= room)
        return fail(o, err, cap, "was given too often", t);
    s->extra_len += (size_t)m;
    s->cfg.route_extra = s->route_extra;
    return 0;
}

static int set_router_opt(const kvr_option *o, void *target, const char *t, char *err, size_t cap)
{
    sim_settings *s = target;
    if (s->n_router_opts == sizeof s->router_opts / sizeof s->router_opts[0])
        return fail(o, err, cap, "was given too often", t);
    s->router_opts[s->n_router_opts++] = (char *)t;
    return 0;
}

static const kvr_option sim_rows[] = {
    ROW("trace", KVR_OPT_STRING, trace, 0, 0, "FILE",
        "Mooncake jsonl (timestamp, input_length, output_length, hash_ids); required"),
    ROW("limit", KVR_OPT_U64, limit, 0, 1e9, "N", "first N requests (0: all)"),
    ROW("skip", KVR_OPT_U64, skip, 0, 1e9, "N", "start after the first N requests of the trace"),
    ROW("engines", KVR_OPT_SIZE, cfg.engines, 1, 4096, "N", "engines"),
    ROW("dp", KVR_OPT_U32, cfg.dp, 1, 64, "N", "data-parallel ranks per engine"),
    CUSTOM("policies", "LIST",
           "comma list of kvrouter, round_robin, random, least_loaded, approx_tree, oracle "
           "(default all)", set_policies),
    ROW("router", KVR_OPT_STRING, cfg.router_url, 0, 0, "URL",
        "use this running router (default: start `kvrouter serve`; give it "
        "--router-opt clock_from_requests=1)"),
    ROW("capacity", KVR_OPT_SIZE, cfg.capacity, 1, 1e9, "BLOCKS", "GPU cache per rank in blocks"),
    ROW("block_size", KVR_OPT_U32, cfg.block_size, 1, 4096, "B", "tokens per block"),
    ROW("hicache", KVR_OPT_SIZE, cfg.hicache, 0, 1e9, "BLOCKS",
        "host (cpu) tier per rank in blocks (0: off)"),
    ROW("kimi_share", KVR_OPT_DOUBLE, cfg.kimi_share, 0, 1, "F",
        "share of engines that are Kimi engine_wide"),
    ROW("mm_share", KVR_OPT_DOUBLE, mm_share, 0, 1, "F",
        "share of requests that introduce an image"),
    ROW("wire", KVR_OPT_CHOICE, cfg.wire, 0, 0, "STYLE",
        "events: sglang tagged arrays, one per block; vllm maps, one per batch of blocks",
        .choices = wires),
    FLAG("eagle", cfg.eagle, "Eagle engines (bigram token form)"),
    ROW("speed", KVR_OPT_DOUBLE, cfg.speed, 1e-6, 1e9, "X", "divide trace time by X"),
    ROW("prefill_tps", KVR_OPT_DOUBLE, cfg.prefill_tps, 1, 1e12, "X",
        "prefill tokens/s per worker"),
    ROW("decode_tps", KVR_OPT_DOUBLE, cfg.decode_tps, 1e-3, 1e12, "X",
        "decode tokens/s per request"),
    ROW("kv_read_tps", KVR_OPT_DOUBLE, cfg.kv_read_tps, 0, 1e15, "X",
        "KV context tokens a worker reads per second while decoding (HBM bandwidth / KV bytes "
        "per token): a decode with context c takes c x decode-tps / X of the GPU's time from "
        "prefill (0: decode costs nothing)"),
    ROW("host_load_cost", KVR_OPT_DOUBLE, cfg.host_load_cost, 0, 1e3, "F",
        "a HiCache hit costs F prefill tokens' time"),
    FLAG("no_kv_admission", no_kv_admission, "start every request at once (no KV memory limit)"),
    ROW("sync_every", KVR_OPT_U32, cfg.sync_every, 1, 1e9, "N",
        "wait for the router to apply events every N requests"),
    CUSTOM("router_opt", "K=V",
           "setting for the router this sim starts (repeatable; see kvrouter serve --help)",
           set_router_opt),
    CUSTOM("route_opt", "K=V", "add \"K\": V to every /route body (repeatable)", set_route_opt),
    CUSTOM("model", "NAME", "model name registered with the router (default sim-model)",
           set_model),
    ROW("seed", KVR_OPT_U64, cfg.seed, 0, 18446744073709551615.0, "S",
        "seed for random and multimodal choices, and the router's tie-breaks"),
    ROW("svg", KVR_OPT_STRING, svg, 0, 0, "FILE",
        "write a bar chart (hit rate, TTFT p99 per policy)"),
    ROW("requests_out", KVR_OPT_STRING, requests_out, 0, 0, "FILE",
        "write one line per request and policy (slot, prompt and reused tokens), to compare "
        "policies request by request"),
    FLAG("json", json, "print one JSON object as the last line"),
    FLAG("diagnose", cfg.diagnose,
         "per policy, the best prefix any engine held at each routing moment, the best a "
         "SPEC §5 router can see, and what the choices lost against both (of it, on each "
         "slot's first request: the warm-up of its empty cache)"),
    FLAG("judge", judge,
         "print issue 15's verdict on kvrouter against the baselines (implies --diagnose; "
         "the gap is judged past the warm-up)"),
    FLAG("quiet", quiet, "no progress on stderr"),
};

static void usage(const sim_settings *defaults)
{
    printf("usage: kvrouter sim --trace FILE [options]\n\n"
           "Replays a Mooncake trace on a simulated fleet of mock SGLang engines (real ZeroMQ\n"
           "publishers for the kvrouter policy) under each routing policy, each on fresh\n"
           "engines, and compares prefix-hit rate, load balance and a TTFT proxy.\n\n");
    kvr_opt_help(stdout, sim_rows, sizeof sim_rows / sizeof sim_rows[0], true, defaults);
}

int sim_options_parse(int argc, char **argv, sim_settings *s)
{
    memset(s, 0, sizeof *s);
    kvr_sim_config_defaults(&s->cfg);
    for (int p = 0; p < KVR_SIM_POLICY_COUNT; p++)
        s->which[p] = true;
    kvr_opt_table t = {sim_rows, sizeof sim_rows / sizeof sim_rows[0], s, NULL};
    for (int i = 1; i < argc;) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(s);
            return 1;
        }
        char err[256];
        int rc = kvr_opt_parse_arg(&t, 1, argc, argv, &i, err, sizeof err);
        if (rc == 0) {
            fprintf(stderr, "kvrouter sim: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
        if (rc < 0) {
            fprintf(stderr, "kvrouter sim: %s\n", err);
            return 2;
        }
    }
    if (s->judge)
        s->cfg.diagnose = true;
    if (s->no_kv_admission)
        s->cfg.kv_admission = false;
    s->cfg.log = s->quiet ? NULL : stderr;
    if (!s->trace) {
        fprintf(stderr, "kvrouter sim: --trace FILE is required (try --help)\n");
        return 2;
    }
    return 0;
}
