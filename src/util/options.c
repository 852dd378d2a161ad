/* Option tables (include/kvrouter/options.h): lookup, the typed setters
 * from text and from JSON with their bounds, defaults, the command-line
 * walk, config objects and --help. */
#include "kvrouter/options.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int kvr_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* name and key compare with '-' and '_' alike */
static bool same_name(const char *a, const char *b)
{
    if (!a || !b)
        return false;
    for (; *a && *b; a++, b++) {
        char x = *a == '-' ? '_' : *a, y = *b == '-' ? '_' : *b;
        if (x != y)
            return false;
    }
    return *a == *b;
}

const kvr_option *kvr_opt_find(const kvr_option *rows, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (same_name(rows[i].name, name) || same_name(rows[i].alias, name))
            return &rows[i];
    return NULL;
}

const char *kvr_opt_label(const kvr_option *o, bool cli, const char *prefix, char *buf,
                          size_t cap)
{
    if (cli) {
        size_t k = (size_t)snprintf(buf, cap, "--%s", o->name);
        for (size_t i = 2; i < k && i < cap; i++)
            if (buf[i] == '_')
                buf[i] = '-';
    } else {
        snprintf(buf, cap, "'%s%s'", prefix ? prefix : "", o->name);
    }
    return buf;
}

static void *field(const kvr_option *o, void *target) { return (char *)target + o->offset; }

static bool is_integer_type(kvr_opt_type t)
{
    return t == KVR_OPT_INT || t == KVR_OPT_U32 || t == KVR_OPT_U64 || t == KVR_OPT_SIZE;
}

static uint64_t umax_of(const kvr_option *o)
{
    double cap = o->type == KVR_OPT_U32 ? (double)UINT32_MAX
                 : o->type == KVR_OPT_SIZE ? (double)SIZE_MAX
                                           : 18446744073709551615.0;
    double m = o->max < cap ? o->max : cap;
    return m >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)m;
}

static uint64_t umin_of(const kvr_option *o) { return o->min > 0 ? (uint64_t)ceil(o->min) : 0; }

static int bad(const kvr_option *o, bool cli, const char *prefix, char *err, size_t cap,
               const char *what, const char *got)
{
    char label[160];
    kvr_opt_label(o, cli, prefix, label, sizeof label);
    if (got)
        snprintf(err, cap, "%s %s, got '%s'", label, what, got);
    else
        snprintf(err, cap, "%s %s", label, what);
    return -1;
}

static int bad_range(const kvr_option *o, bool cli, const char *prefix, char *err, size_t cap,
                     const char *got)
{
    char what[128];
    if (o->type == KVR_OPT_INT)
        snprintf(what, sizeof what, "must be an integer in %.0f..%.0f", o->min, o->max);
    else if (is_integer_type(o->type))
        snprintf(what, sizeof what, "must be an integer in %" PRIu64 "..%" PRIu64, umin_of(o),
                 umax_of(o));
    else
        snprintf(what, sizeof what, "must be a number in %g..%g", o->min, o->max);
    return bad(o, cli, prefix, err, cap, what, got);
}

/* The value, already of the row's kind, into the field. */
static void store_u64(const kvr_option *o, void *target, uint64_t v)
{
    void *f = field(o, target);
    if (o->type == KVR_OPT_U32)
        *(uint32_t *)f = (uint32_t)v;
    else if (o->type == KVR_OPT_SIZE)
        *(size_t *)f = (size_t)v;
    else
        *(uint64_t *)f = v;
}

static int set_bool(const kvr_option *o, void *target, const char *t, bool cli,
                    const char *prefix, char *err, size_t cap)
{
    static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0",
                                                                                 "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(t, yes[i]) == 0 || strcmp(t, no[i]) == 0) {
            *(bool *)field(o, target) = strcmp(t, yes[i]) == 0;
            return 0;
        }
    }
    return bad(o, cli, prefix, err, cap, "must be true or false", t);
}

static int set_choice(const kvr_option *o, void *target, const char *t, bool cli,
                      const char *prefix, char *err, size_t cap)
{
    char what[256] = "must be one of";
    size_t k = strlen(what);
    for (int i = 0; o->choices && o->choices[i]; i++) {
        if (strcmp(t, o->choices[i]) == 0) {
            *(int *)field(o, target) = i;
            return 0;
        }
        k += (size_t)snprintf(what + k, k < sizeof what ? sizeof what - k : 0, "%s %s",
                              i ? "," : "", o->choices[i]);
    }
    return bad(o, cli, prefix, err, cap, what, t);
}

static int set_from_text(const kvr_option *o, void *target, const char *t, bool cli,
                         const char *prefix, char *err, size_t cap)
{
    if (!t)
        return bad(o, cli, prefix, err, cap, "needs a value", NULL);
    switch (o->type) {
    case KVR_OPT_BOOL:
        return set_bool(o, target, t, cli, prefix, err, cap);
    case KVR_OPT_CHOICE:
        return set_choice(o, target, t, cli, prefix, err, cap);
    case KVR_OPT_STRING:
        *(const char **)field(o, target) = t;
        return 0;
    case KVR_OPT_CUSTOM:
        return o->set_text ? o->set_text(o, target, t, err, cap)
                           : bad(o, cli, prefix, err, cap, "cannot be set from text", NULL);
    case KVR_OPT_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(t, &end, 10);
        if (!*t || errno || *end || (double)v < o->min || (double)v > o->max)
            return bad_range(o, cli, prefix, err, cap, t);
        *(int *)field(o, target) = (int)v;
        return 0;
    }
    case KVR_OPT_U32:
    case KVR_OPT_U64:
    case KVR_OPT_SIZE: {
        uint64_t v;
        if (kvr_parse_u64(t, umin_of(o), umax_of(o), &v) != 0)
            return bad_range(o, cli, prefix, err, cap, t);
        store_u64(o, target, v);
        return 0;
    }
    case KVR_OPT_DOUBLE: {
        char *end;
        double v = strtod(t, &end);
        if (!*t || *end || !isfinite(v) || v < o->min || v > o->max)
            return bad_range(o, cli, prefix, err, cap, t);
        *(double *)field(o, target) = v;
        return 0;
    }
    }
    return bad(o, cli, prefix, err, cap, "has an unknown type", NULL);
}

int kvr_opt_set_text(const kvr_option *o, void *target, const char *text, char *err, size_t cap)
{
    return set_from_text(o, target, text, true, NULL, err, cap);
}

/* A JSON number as the row's numeric kind. */
static int set_number(const kvr_option *o, void *target, double v, const char *prefix,
                      char *err, size_t cap)
{
    char got[64];
    snprintf(got, sizeof got, "%.17g", v);
    if (o->type == KVR_OPT_STRING || o->type == KVR_OPT_CHOICE || o->type == KVR_OPT_CUSTOM)
        return bad(o, false, prefix, err, cap, "must be a string", got);
    if (o->type == KVR_OPT_BOOL) {
        if (v != 0 && v != 1)
            return bad(o, false, prefix, err, cap, "must be true or false", got);
        *(bool *)field(o, target) = v == 1;
        return 0;
    }
    if (o->type == KVR_OPT_DOUBLE) {
        if (!isfinite(v) || v < o->min || v > o->max)
            return bad_range(o, false, prefix, err, cap, got);
        *(double *)field(o, target) = v;
        return 0;
    }
    if (!is_integer_type(o->type) || v != floor(v) || !isfinite(v))
        return bad_range(o, false, prefix, err, cap, got);
    if (o->type == KVR_OPT_INT) {
        if (v < o->min || v > o->max)
            return bad_range(o, false, prefix, err, cap, got);
        *(int *)field(o, target) = (int)v;
        return 0;
    }
    if (v < (double)umin_of(o) || v > (double)umax_of(o) || v >= 18446744073709551616.0)
        return bad_range(o, false, prefix, err, cap, got);
    store_u64(o, target, (uint64_t)v);
    return 0;
}

int kvr_opt_set_double(const kvr_option *o, void *target, double v, char *err, size_t cap)
{
    return set_number(o, target, v, NULL, err, cap);
}

int kvr_opt_set_json(const kvr_option *o, void *target, const json_t *v, const char *prefix,
                     char *err, size_t cap)
{
    if (o->type == KVR_OPT_CUSTOM && o->set_json)
        return o->set_json(o, target, v, err, cap);
    if (json_is_string(v)) {
        /* Strings are for strings and names; numbers as strings only for
         * u64 (ids beyond what JSON integers carry safely). */
        if (o->type == KVR_OPT_STRING || o->type == KVR_OPT_CHOICE || o->type == KVR_OPT_CUSTOM ||
            o->type == KVR_OPT_U64)
            return set_from_text(o, target, json_string_value(v), false, prefix, err, cap);
        if (o->type == KVR_OPT_BOOL)
            return bad(o, false, prefix, err, cap, "must be true or false", json_string_value(v));
        return bad_range(o, false, prefix, err, cap, json_string_value(v));
    }
    if (json_is_boolean(v)) {
        if (o->type != KVR_OPT_BOOL) {
            if (is_integer_type(o->type) || o->type == KVR_OPT_DOUBLE)
                return bad_range(o, false, prefix, err, cap, json_is_true(v) ? "true" : "false");
            return bad(o, false, prefix, err, cap, "must be a string", NULL);
        }
        *(bool *)field(o, target) = json_is_true(v);
        return 0;
    }
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (o->type == KVR_OPT_U64 && i >= 0) { /* exact above 2^53 */
            uint64_t u = (uint64_t)i;
            if (u < umin_of(o) || u > umax_of(o)) {
                char got[32];
                snprintf(got, sizeof got, "%" PRIu64, u);
                return bad_range(o, false, prefix, err, cap, got);
            }
            store_u64(o, target, u);
            return 0;
        }
        return set_number(o, target, (double)i, prefix, err, cap);
    }
    if (json_is_real(v))
        return set_number(o, target, json_real_value(v), prefix, err, cap);
    const char *kind = json_is_object(v) ? "an object" : json_is_array(v) ? "an array" : "null";
    char what[64];
    snprintf(what, sizeof what, "must not be %s", kind);
    return bad(o, false, prefix, err, cap, what, NULL);
}

int kvr_opt_defaults(const kvr_option *rows, size_t n, void *target, char *err, size_t cap)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].def && rows[i].def[0] && rows[i].type != KVR_OPT_CUSTOM &&
            set_from_text(&rows[i], target, rows[i].def, false, NULL, err, cap) != 0)
            return -1;
    return 0;
}

int kvr_opt_env(const kvr_option *rows, size_t n, void *target, char *err, size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = rows[i].env ? getenv(rows[i].env) : NULL;
        if (!v || !v[0])
            continue;
        char e[256];
        if (set_from_text(&rows[i], target, v, true, NULL, e, sizeof e) != 0) {
            snprintf(err, cap, "environment %s: %s", rows[i].env, e);
            return -1;
        }
    }
    return 0;
}

bool kvr_opt_same(const kvr_option *o, const void *a, const void *b)
{
    const void *fa = (const char *)a + o->offset, *fb = (const char *)b + o->offset;
    switch (o->type) {
    case KVR_OPT_BOOL: return *(const bool *)fa == *(const bool *)fb;
    case KVR_OPT_INT:
    case KVR_OPT_CHOICE: return *(const int *)fa == *(const int *)fb;
    case KVR_OPT_U32: return *(const uint32_t *)fa == *(const uint32_t *)fb;
    case KVR_OPT_U64: return *(const uint64_t *)fa == *(const uint64_t *)fb;
    case KVR_OPT_SIZE: return *(const size_t *)fa == *(const size_t *)fb;
    case KVR_OPT_DOUBLE: return *(const double *)fa == *(const double *)fb;
    case KVR_OPT_STRING: {
        const char *x = *(const char *const *)fa, *y = *(const char *const *)fb;
        return x == y || (x && y && strcmp(x, y) == 0);
    }
    case KVR_OPT_CUSTOM: return true;
    }
    return true;
}

static size_t field_size(kvr_opt_type t)
{
    switch (t) {
    case KVR_OPT_BOOL: return sizeof(bool);
    case KVR_OPT_INT:
    case KVR_OPT_CHOICE: return sizeof(int);
    case KVR_OPT_U32: return sizeof(uint32_t);
    case KVR_OPT_U64: return sizeof(uint64_t);
    case KVR_OPT_SIZE: return sizeof(size_t);
    case KVR_OPT_DOUBLE: return sizeof(double);
    case KVR_OPT_STRING: return sizeof(const char *);
    case KVR_OPT_CUSTOM: return 0;
    }
    return 0;
}

void kvr_opt_copy(const kvr_option *o, void *dst, const void *src)
{
    memcpy((char *)dst + o->offset, (const char *)src + o->offset, field_size(o->type));
}

static const kvr_option *find_in(const kvr_opt_table *tables, size_t n_tables, const char *name,
                                 const kvr_opt_table **which)
{
    for (size_t t = 0; t < n_tables; t++) {
        const kvr_option *o = kvr_opt_find(tables[t].rows, tables[t].n, name);
        if (o) {
            *which = &tables[t];
            return o;
        }
    }
    return NULL;
}

int kvr_opt_parse_arg(const kvr_opt_table *tables, size_t n_tables, int argc, char **argv,
                      int *i, char *err, size_t cap)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0 || !a[2])
        return 0;
    char name[128];
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (len >= sizeof name)
        return 0;
    memcpy(name, a + 2, len);
    name[len] = 0;
    const kvr_opt_table *t = NULL;
    const kvr_option *o = find_in(tables, n_tables, name, &t);
    if (!o || (o->flags & KVR_OPT_NO_CLI))
        return 0;
    const char *value;
    if (o->flags & KVR_OPT_NO_VALUE) {
        if (eq)
            return bad(o, true, NULL, err, cap, "takes no value", eq + 1);
        value = o->type == KVR_OPT_BOOL ? "true" : "";
        *i += 1;
    } else if (eq) {
        value = eq + 1;
        *i += 1;
    } else {
        if (*i + 1 >= argc)
            return bad(o, true, NULL, err, cap, "needs a value", NULL);
        value = argv[*i + 1];
        *i += 2;
    }
    return set_from_text(o, t->target, value, true, NULL, err, cap) == 0 ? 1 : -1;
}

int kvr_opt_load_json(const kvr_opt_table *tables, size_t n_tables, const json_t *obj,
                      char *err, size_t cap)
{
    const char *prefix = n_tables ? tables[0].prefix : NULL;
    if (!json_is_object(obj)) {
        snprintf(err, cap, "config%s%s must be a JSON object", prefix ? " " : "",
                 prefix ? prefix : "");
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        const kvr_opt_table *t = NULL;
        const kvr_option *o = find_in(tables, n_tables, key, &t);
        if (!o || (o->flags & KVR_OPT_NO_CONFIG)) {
            snprintf(err, cap, "unknown key '%s%s'", prefix ? prefix : "", key);
            return -1;
        }
        if (kvr_opt_set_json(o, t->target, v, t->prefix, err, cap) != 0)
            return -1;
    }
    return 0;
}

int kvr_opt_set_pair(const kvr_opt_table *table, const char *pair, char *err, size_t cap)
{
    const char *eq = strchr(pair, '=');
    char key[128];
    if (!eq || eq == pair || (size_t)(eq - pair) >= sizeof key) {
        snprintf(err, cap, "'%s' is not key=value", pair);
        return -1;
    }
    memcpy(key, pair, (size_t)(eq - pair));
    key[eq - pair] = 0;
    const kvr_option *o = kvr_opt_find(table->rows, table->n, key);
    if (!o) {
        snprintf(err, cap, "'%s%s' is not an option (known: ", table->prefix ? table->prefix : "",
                 key);
        size_t k = strlen(err);
        for (size_t i = 0; i < table->n && k < cap; i++)
            k += (size_t)snprintf(err + k, cap - k, "%s%s", i ? ", " : "", table->rows[i].name);
        if (k < cap)
            snprintf(err + k, cap - k, ")");
        return -1;
    }
    return set_from_text(o, table->target, eq + 1, false, table->prefix, err, cap);
}

static const char *metavar(const kvr_option *o)
{
    if (o->metavar)
        return o->metavar;
    switch (o->type) {
    case KVR_OPT_BOOL: return "BOOL";
    case KVR_OPT_DOUBLE: return "X";
    case KVR_OPT_STRING: return "TEXT";
    case KVR_OPT_CHOICE: return "NAME";
    case KVR_OPT_CUSTOM: return "VALUE";
    default: return "N";
    }
}

/* The field's value in defaults as text; "" when unset (zero, NULL). */
static void value_text(const kvr_option *o, const void *defaults, char *buf, size_t cap)
{
    buf[0] = 0;
    if (!defaults || o->type == KVR_OPT_CUSTOM)
        return;
    const void *f = (const char *)defaults + o->offset;
    switch (o->type) {
    case KVR_OPT_BOOL: snprintf(buf, cap, "%s", *(const bool *)f ? "true" : "false"); break;
    case KVR_OPT_INT: snprintf(buf, cap, "%d", *(const int *)f); break;
    case KVR_OPT_U32:
        if (*(const uint32_t *)f)
            snprintf(buf, cap, "%" PRIu32, *(const uint32_t *)f);
        break;
    case KVR_OPT_U64:
        if (*(const uint64_t *)f)
            snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)f);
        break;
    case KVR_OPT_SIZE:
        if (*(const size_t *)f)
            snprintf(buf, cap, "%zu", *(const size_t *)f);
        break;
    case KVR_OPT_DOUBLE: snprintf(buf, cap, "%g", *(const double *)f); break;
    case KVR_OPT_STRING:
        if (*(const char *const *)f)
            snprintf(buf, cap, "%s", *(const char *const *)f);
        break;
    default: break;
    }
}

/* "  HEAD                       text..." wrapped at 100 columns. */
static void print_wrapped(FILE *out, const char *head, const char *text)
{
    enum { INDENT = 29, WIDTH = 100 };
    fprintf(out, "  %-26s ", head);
    size_t col = INDENT;
    const char *p = text;
    while (*p) {
        const char *sp = strchr(p, ' ');
        size_t w = sp ? (size_t)(sp - p) : strlen(p);
        if (col > INDENT && col + 1 + w > WIDTH) {
            fprintf(out, "\n%*s", INDENT, "");
            col = INDENT;
        } else if (col > INDENT) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", (int)w, p);
        col += w;
        p += w + (sp ? 1 : 0);
    }
    fputc('\n', out);
}

void kvr_opt_help(FILE *out, const kvr_option *rows, size_t n, bool cli, const void *defaults)
{
    for (size_t i = 0; i < n; i++) {
        const kvr_option *o = &rows[i];
        if (o->flags & (cli ? KVR_OPT_NO_CLI : KVR_OPT_NO_CONFIG))
            continue;
        char head[128];
        if (cli) {
            char label[96];
            kvr_opt_label(o, true, NULL, label, sizeof label);
            if (o->flags & KVR_OPT_NO_VALUE)
                snprintf(head, sizeof head, "%s", label);
            else
                snprintf(head, sizeof head, "%s %s", label, metavar(o));
        } else {
            snprintf(head, sizeof head, "%s", o->name);
        }
        char extra[160] = "";
        size_t k = 0;
        if (o->type == KVR_OPT_CHOICE) {
            k += (size_t)snprintf(extra + k, sizeof extra - k, " (");
            for (int c = 0; o->choices && o->choices[c]; c++)
                k += (size_t)snprintf(extra + k, k < sizeof extra ? sizeof extra - k : 0, "%s%s",
                                      c ? "|" : "", o->choices[c]);
            if (k < sizeof extra)
                k += (size_t)snprintf(extra + k, sizeof extra - k, ")");
        }
        char dv[64] = "";
        if (o->flags & KVR_OPT_NO_VALUE)
            ; /* a flag: its default is its absence */
        else if (o->def && o->def[0])
            snprintf(dv, sizeof dv, "%s", o->def);
        else
            value_text(o, defaults, dv, sizeof dv);
        if (dv[0] && k < sizeof extra)
            snprintf(extra + k, sizeof extra - k, " (default %s)", dv);
        char text[600];
        snprintf(text, sizeof text, "%s%s", o->help ? o->help : "", extra);
        if (strlen(head) >= 26) {
            fprintf(out, "  %s\n", head);
            head[0] = 0;
        }
        print_wrapped(out, head, text);
        if (o->alias && cli)
            fprintf(out, "  %-26s (also --%s)\n", "", o->alias);
        if (o->env)
            fprintf(out, "  %-26s (environment: %s)\n", "", o->env);
    }
}
