/* JSON lines of `kvrouter decode`; see decode_json.h. */
#include "cli/decode_json.h"

#include <inttypes.h>
#include <jansson.h>

void kvr_decode_json_str(FILE *out, kvr_str s)
{
    if (!s.ptr) {
        fputs("null", out);
        return;
    }
    /* jansson escapes valid UTF-8; anything else is escaped byte by byte */
    json_t *j = json_stringn(s.ptr, s.len);
    if (j) {
        json_dumpf(j, out, JSON_ENCODE_ANY | JSON_COMPACT);
        json_decref(j);
        return;
    }
    fputc('"', out);
    for (uint32_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void print_u64s(FILE *out, const char *key, const uint64_t *v, uint32_t n)
{
    fprintf(out, ",\"%s\":[", key);
    for (uint32_t i = 0; i < n; i++)
        fprintf(out, i ? ",%" PRIu64 : "%" PRIu64, v[i]);
    fputc(']', out);
}

static void print_opt_i64(FILE *out, const char *key, bool has, int64_t v)
{
    if (has)
        fprintf(out, ",\"%s\":%" PRId64, key, v);
    else
        fprintf(out, ",\"%s\":null", key);
}

static void print_str_field(FILE *out, const char *key, kvr_str s)
{
    fprintf(out, ",\"%s\":", key);
    kvr_decode_json_str(out, s);
}

/* group_idx, kind, sliding window, locality: stores and removals alike */
static void print_group_fields(FILE *out, const kvr_raw_event *ev)
{
    print_opt_i64(out, "group_idx", ev->has_group_idx, ev->group_idx);
    print_str_field(out, "kv_cache_spec_kind", ev->kv_cache_spec_kind);
    print_opt_i64(out, "kv_cache_spec_sliding_window", ev->has_sliding_window,
                  ev->sliding_window);
    print_str_field(out, "locality", ev->locality);
}

void kvr_decode_json_event(FILE *out, const kvr_batch *b, const kvr_raw_event *ev)
{
    static const char *const types[] = {"stored", "removed", "cleared", "dropped"};
    fprintf(out, "{\"type\":\"%s\"", types[ev->type <= KVR_EV_DROPPED ? ev->type : 3]);
    if (ev->type == KVR_EV_DROPPED) {
        fprintf(out, ",\"reason\":\"%s\"}\n", kvr_drop_reason_name(ev->drop_reason));
        return;
    }
    print_opt_i64(out, "dp_rank", b->has_dp_rank, b->dp_rank);
    if (ev->type == KVR_EV_CLEARED) {
        fputs("}\n", out);
        return;
    }
    fprintf(out, ",\"tier\":\"%s\"", kvr_tier_name(ev->tier));
    bool stored = ev->type == KVR_EV_STORED;
    if (stored) {
        if (ev->has_parent)
            fprintf(out, ",\"parent\":%" PRIu64, ev->parent);
        else
            fputs(",\"parent\":null", out);
    }
    print_u64s(out, "block_hashes", ev->block_hashes, ev->n_block_hashes);
    if (stored) {
        print_u64s(out, "token_ids", ev->token_ids, ev->n_token_ids);
        fprintf(out, ",\"block_size\":%" PRIu32 ",\"eagle\":%s", ev->block_size,
                ev->eagle ? "true" : "false");
        print_str_field(out, "lora_name", ev->lora_name);
        print_str_field(out, "cache_salt", ev->cache_salt);
    }
    print_group_fields(out, ev);
    if (stored) {
        print_opt_i64(out, "lora_id", ev->has_lora_id, ev->lora_id);
        print_str_field(out, "session_id", ev->session_id);
    }
    fputs("}\n", out);
}
