/* The sim's outputs: a table for people, one JSON line for scripts, and an
 * SVG chart (hit rate and TTFT p99 per policy). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "sim/sim.h"

void kvr_sim_print_table(FILE *out, const kvr_sim_result *res, const bool *which)
{
    fprintf(out, "%-13s %8s %9s %8s %9s %9s %11s %11s %8s\n", "policy", "requests", "hit_rate",
            "gpu_hit", "load", "requests", "ttft_p50ms", "ttft_p99ms", "wall_s");
    fprintf(out, "%-13s %8s %9s %8s %9s %9s %11s %11s %8s\n", "", "", "", "", "max/mean",
            "max/mean", "", "", "");
    for (int p = 0; p < KVR_SIM_POLICY_COUNT; p++) {
        const kvr_sim_result *r = &res[p];
        if (!which[p] || !r->ran)
            continue;
        fprintf(out, "%-13s %8zu %8.2f%% %7.2f%% %9.3f %9.3f %11.1f %11.1f %8.2f\n",
                kvr_sim_policy_name((kvr_sim_policy)p), r->requests, 100.0 * r->hit_rate,
                100.0 * r->gpu_hit_rate, r->max_mean_load, r->max_mean_requests, r->ttft_p50_ms,
                r->ttft_p99_ms, r->wall_s);
    }
}

char *kvr_sim_json(const kvr_sim_config *cfg, const kvr_sim_result *res, const bool *which)
{
    json_t *pol = json_object();
    for (int p = 0; p < KVR_SIM_POLICY_COUNT; p++) {
        const kvr_sim_result *r = &res[p];
        if (!which[p] || !r->ran)
            continue;
        json_t *o = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:f,s:f}", "hit_rate", r->hit_rate,
                              "gpu_hit_rate", r->gpu_hit_rate, "max_mean_load", r->max_mean_load,
                              "max_mean_requests", r->max_mean_requests, "ttft_p50_ms",
                              r->ttft_p50_ms, "ttft_p99_ms", r->ttft_p99_ms, "requests",
                              (json_int_t)r->requests, "ttft_mean_ms", r->ttft_mean_ms, "wall_s",
                              r->wall_s);
        if (p == KVR_SIM_KVROUTER) {
            json_object_set_new(o, "router_errors", json_integer((json_int_t)r->route_errors));
            json_object_set_new(o, "sync_timeouts", json_integer((json_int_t)r->sync_timeouts));
            json_object_set_new(o, "http_calls", json_integer((json_int_t)r->http_calls));
            json_object_set_new(o, "http_s", json_real(r->http_s));
            json_object_set_new(o, "sync_polls", json_integer((json_int_t)r->sync_polls));
            json_object_set_new(o, "sync_s", json_real(r->sync_s));
            json_object_set_new(o, "router_drops", json_integer((json_int_t)r->router_drops));
            json_object_set_new(o, "router_wide_tokens",
                                json_integer((json_int_t)r->router_wide_tokens));
            json_object_set_new(o, "router_mm_blocks_excluded",
                                json_integer((json_int_t)r->router_mm_excluded));
            json_object_set_new(o, "router_seq_gaps", json_integer((json_int_t)r->router_seq_gaps));
        }
        json_object_set_new(pol, kvr_sim_policy_name((kvr_sim_policy)p), o);
    }
    json_t *root = json_pack(
        "{s:o,s:{s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:b,s:s}}", "policies", pol, "config",
        "engines", (json_int_t)cfg->engines, "dp", (json_int_t)cfg->dp, "block_size",
        (json_int_t)cfg->block_size, "capacity", (json_int_t)cfg->capacity, "hicache",
        (json_int_t)cfg->hicache, "kimi_share", cfg->kimi_share, "speed", cfg->speed,
        "prefill_tps", cfg->prefill_tps, "decode_tps", cfg->decode_tps, "eagle", cfg->eagle,
        "wire", cfg->wire == KVR_WIRE_VLLM ? "vllm" : "sglang");
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(root);
    return s;
}

static void svg_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

/* One horizontal-bar panel: a row per policy, kvrouter highlighted. */
static void panel(FILE *f, double x0, double y0, double w, const char *heading,
                  const kvr_sim_result *res, const bool *which, bool hit, double vmax)
{
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"15\" font-weight=\"bold\">%s</text>\n",
            x0, y0, heading);
    double label_w = 110, bar_w = w - label_w - 90, row = 30, y = y0 + 14;
    if (vmax <= 0)
        vmax = 1;
    for (int p = 0; p < KVR_SIM_POLICY_COUNT; p++) {
        if (!which[p] || !res[p].ran)
            continue;
        double v = hit ? 100.0 * res[p].hit_rate : res[p].ttft_p99_ms;
        double bw = bar_w * (v < vmax ? v : vmax);
        bw /= vmax;
        bool clipped = v > vmax;
        const char *color = p == KVR_SIM_KVROUTER ? "#d9480f"
                            : p == KVR_SIM_ORACLE ? "#868e96"
                                                  : "#4263eb";
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"13\" text-anchor=\"end\">%s</text>\n",
                x0 + label_w - 8, y + 17, kvr_sim_policy_name((kvr_sim_policy)p));
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.1f\" height=\"22\" fill=\"%s\"/>\n",
                x0 + label_w, y + 2, bw > 0.5 ? bw : 0.5, color);
        /* A clipped bar carries its value inside, so the label stays on the canvas. */
        if (clipped)
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%.0f\" font-size=\"12\" fill=\"white\" "
                    "text-anchor=\"end\">%.0f ms (off scale) &#187;</text>\n",
                    x0 + label_w + bw - 6, y + 17, v);
        else if (hit)
            fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"12\">%.1f%%</text>\n",
                    x0 + label_w + bw + 6, y + 17, v);
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"12\">%.0f ms</text>\n",
                    x0 + label_w + bw + 6, y + 17, v);
        y += row;
    }
}

int kvr_sim_write_svg(const char *path, const kvr_sim_result *res, const bool *which,
                      const char *title)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    /* Scales: hit rates up to the best one (small differences must show);
     * TTFT up to the worst non-oracle policy, since the oracle ignores load
     * and its queue can dwarf everyone else's (it is drawn clipped then). */
    int rows = 0;
    double ttft_max = 0, ttft_oracle = 0, hit_max = 0;
    for (int p = 0; p < KVR_SIM_POLICY_COUNT; p++) {
        if (!which[p] || !res[p].ran)
            continue;
        rows++;
        if (p == KVR_SIM_ORACLE)
            ttft_oracle = res[p].ttft_p99_ms;
        else if (res[p].ttft_p99_ms > ttft_max)
            ttft_max = res[p].ttft_p99_ms;
        if (res[p].hit_rate > hit_max)
            hit_max = res[p].hit_rate;
    }
    if (ttft_max == 0 || ttft_oracle < 1.5 * ttft_max)
        ttft_max = ttft_max > ttft_oracle ? ttft_max : ttft_oracle;
    double hit_scale = 100.0 * hit_max * 1.15;
    if (hit_scale > 100 || hit_scale <= 0)
        hit_scale = 100;
    double W = 900, panel_w = 430, H = 90 + rows * 30 + 40;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f, "<text x=\"20\" y=\"30\" font-size=\"17\" font-weight=\"bold\">");
    svg_escape(f, title ? title : "kvrouter sim");
    fprintf(f, "</text>\n");
    panel(f, 20, 65, panel_w, "prefix hit rate (higher is better)", res, which, true, hit_scale);
    panel(f, 20 + panel_w + 20, 65, panel_w, "TTFT p99 (lower is better)", res, which, false,
          ttft_max * 1.1);
    fprintf(f,
            "<text x=\"20\" y=\"%.0f\" font-size=\"11\" fill=\"#555\">hit rate = reused prompt "
            "tokens / prompt tokens, from the engines' own caches; TTFT = virtual-time queueing "
            "+ prefill of uncached tokens</text>\n",
            H - 14);
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}
