/* Option tables: one row per setting (name, type, offsetof target, bounds,
 * default, help) feeding the command line, config-file keys, `--router-opt
 * key=value` and `--help` alike, so a new setting is one row and the four
 * can never disagree. `kvrouter serve` (src/cli/serve_options.c) and the
 * router (kvr_router_options) use it; any command can.
 *
 * Names: a row's name is its config key (snake_case); its command-line flag
 * is "--" + the name with '_' written '-'. Lookups accept either spelling
 * and the row's alias. Every setter checks type and bounds and, on failure,
 * writes one line naming the option and leaves the target untouched. */
#ifndef KVROUTER_OPTIONS_H
#define KVROUTER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct json_t; /* jansson */

typedef enum {
    KVR_OPT_BOOL = 0, /* bool: true/false, 1/0 (config: JSON booleans or 0/1) */
    KVR_OPT_INT,      /* int */
    KVR_OPT_U32,      /* uint32_t */
    KVR_OPT_U64,      /* uint64_t */
    KVR_OPT_SIZE,     /* size_t */
    KVR_OPT_DOUBLE,   /* double, finite */
    KVR_OPT_STRING,   /* const char *, borrowed from the text or JSON given */
    KVR_OPT_CHOICE,   /* int: index of the value in choices */
    KVR_OPT_CUSTOM    /* the row's set_text / set_json parse it */
} kvr_opt_type;

/* Row flags. */
#define KVR_OPT_NO_CONFIG 1u /* a command-line flag only */
#define KVR_OPT_NO_CLI 2u    /* a config key only */
#define KVR_OPT_NO_VALUE 4u  /* a flag without a value: BOOL set true, CUSTOM gets "" */
#define KVR_OPT_RELOAD 8u    /* applied again when the config file is reloaded */

typedef struct kvr_option kvr_option;
/* Custom setters: 0, or -1 with err set (they name the option themselves
 * through kvr_opt_label). */
typedef int (*kvr_opt_text_fn)(const kvr_option *o, void *target, const char *text, char *err,
                               size_t cap);
typedef int (*kvr_opt_json_fn)(const kvr_option *o, void *target, const struct json_t *v,
                               char *err, size_t cap);

struct kvr_option {
    const char *name;
    kvr_opt_type type;
    size_t offset;               /* offsetof(target struct, field) */
    double min, max;             /* inclusive bounds of numeric types */
    const char *def;             /* default as text ("" = none); applied by kvr_opt_defaults */
    const char *help;
    const char *metavar;         /* --help: "N", "ADDR:PORT"; NULL = from the type */
    const char *const *choices;  /* KVR_OPT_CHOICE: NULL-terminated */
    kvr_opt_text_fn set_text;    /* KVR_OPT_CUSTOM */
    kvr_opt_json_fn set_json;    /* KVR_OPT_CUSTOM; NULL: strings go to set_text */
    unsigned flags;
    const char *alias;           /* another accepted name, e.g. Dynamo's */
    const char *env;             /* environment variable read by kvr_opt_env, or NULL */
};

/* A table applied to one struct; `prefix` names its keys in messages
 * (e.g. "router." for the router object of a config file). */
typedef struct {
    const kvr_option *rows;
    size_t n;
    void *target;
    const char *prefix;
} kvr_opt_table;

/* The row called name (either spelling, or its alias), or NULL. */
const kvr_option *kvr_opt_find(const kvr_option *rows, size_t n, const char *name);
/* "--name" (cli) or "'prefix.name'" for messages. */
const char *kvr_opt_label(const kvr_option *o, bool cli, const char *prefix, char *buf,
                          size_t cap);

/* Setters: 0, or -1 with a message in err naming the option. */
int kvr_opt_set_text(const kvr_option *o, void *target, const char *text, char *err, size_t cap);
int kvr_opt_set_json(const kvr_option *o, void *target, const struct json_t *v,
                     const char *prefix, char *err, size_t cap);
/* A number into a numeric or boolean row (bounds as for JSON numbers). */
int kvr_opt_set_double(const kvr_option *o, void *target, double v, char *err, size_t cap);
/* Every row's default (rows with def NULL or "" are left alone); -1 names
 * the first default that does not parse (a table bug). */
int kvr_opt_defaults(const kvr_option *rows, size_t n, void *target, char *err, size_t cap);

/* Rows with an env variable that is set (and not empty) take its value as
 * text. 0, or -1 with err naming the variable. */
int kvr_opt_env(const kvr_option *rows, size_t n, void *target, char *err, size_t cap);

/* Whether the row's field is the same in targets a and b (strings by
 * content, NULL == NULL). CUSTOM rows have no field: always true, their
 * owner compares them. */
bool kvr_opt_same(const kvr_option *o, const void *a, const void *b);
/* Copies the row's field from src to dst (a STRING's pointer, borrowed as
 * in src). CUSTOM rows: nothing. */
void kvr_opt_copy(const kvr_option *o, void *dst, const void *src);

/* Command line: if argv[*i] is a flag of one of the tables, applies it
 * (with its value argv[*i + 1] unless NO_VALUE; "--name=value" works too),
 * advances *i past it and returns 1; 0 when no table has it; -1 with err
 * for a missing or bad value. */
int kvr_opt_parse_arg(const kvr_opt_table *tables, size_t n_tables, int argc, char **argv,
                      int *i, char *err, size_t cap);
/* A JSON object of config keys: every key must be a row (not NO_CONFIG) of
 * one of the tables; an unknown key or a wrong type is -1 with err naming
 * it. Keys apply in the object's order. */
int kvr_opt_load_json(const kvr_opt_table *tables, size_t n_tables, const struct json_t *obj,
                      char *err, size_t cap);
/* "key=value" (the --router-opt form) into one table. */
int kvr_opt_set_pair(const kvr_opt_table *table, const char *pair, char *err, size_t cap);

/* --help lines of the table's command-line flags (cli) or config keys. A
 * row's default shown is its def text, else (defaults != NULL: a target
 * holding the defaults) the field's value there when it is set. */
void kvr_opt_help(FILE *out, const kvr_option *rows, size_t n, bool cli, const void *defaults);

/* Strict unsigned decimal in [min, max]: no sign, space, junk or overflow.
 * 0, or -1. */
int kvr_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
