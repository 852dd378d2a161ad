/* Request field parsing with errors that name the field. */
#include "server/json_util.h"

#include "server/json_body.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

bool kvr_json_u64(const json_t *v, bool allow_negative, uint64_t *out)
{
    if (kvr_json_body_u64(v, out))
        return true; /* a JSON integer above INT64_MAX */
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 && !allow_negative)
            return false;
        *out = (uint64_t)i;
        return true;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n == 0 || n > 20)
            return false;
        uint64_t x = 0;
        for (size_t i = 0; i < n; i++) {
            if (s[i] < '0' || s[i] > '9')
                return false;
            uint64_t d = (uint64_t)(s[i] - '0');
            if (x > (UINT64_MAX - d) / 10)
                return false;
            x = x * 10 + d;
        }
        *out = x;
        return true;
    }
    return false;
}

static bool absent(json_t *v) { return v == NULL || json_is_null(v); }

bool kvr_json_get_u64(json_t *obj, const char *key, bool required, uint64_t *out,
                      kvr_json_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (absent(v)) {
        if (required)
            snprintf(err->msg, sizeof err->msg, "missing field '%s'", key);
        return !required;
    }
    if (!kvr_json_u64(v, false, out)) {
        snprintf(err->msg, sizeof err->msg,
                 "field '%s' must be an unsigned 64-bit integer (number or decimal string)", key);
        return false;
    }
    return true;
}

bool kvr_json_get_uint(json_t *obj, const char *key, bool required, uint64_t min, uint64_t max,
                       uint64_t *out, kvr_json_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (absent(v)) {
        if (required)
            snprintf(err->msg, sizeof err->msg, "missing field '%s'", key);
        return !required;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) < min || (uint64_t)json_integer_value(v) > max) {
        snprintf(err->msg, sizeof err->msg, "field '%s' must be an integer in [%" PRIu64
                 ", %" PRIu64 "]", key, min, max);
        return false;
    }
    *out = (uint64_t)json_integer_value(v);
    return true;
}

bool kvr_json_get_str(json_t *obj, const char *key, bool required, bool nonempty,
                      size_t max_len, const char **out, kvr_json_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (absent(v)) {
        if (required)
            snprintf(err->msg, sizeof err->msg, "missing field '%s'", key);
        return !required;
    }
    if (!json_is_string(v)) {
        snprintf(err->msg, sizeof err->msg, "field '%s' must be a string", key);
        return false;
    }
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if ((nonempty && n == 0) || n >= max_len || strlen(s) != n) {
        snprintf(err->msg, sizeof err->msg,
                 "field '%s' must be a %sstring shorter than %zu bytes without NUL",
                 key, nonempty ? "non-empty " : "", max_len);
        return false;
    }
    *out = s;
    return true;
}

bool kvr_json_get_bool(json_t *obj, const char *key, bool *present, bool *out,
                       kvr_json_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (present)
        *present = false;
    if (absent(v))
        return true;
    if (!json_is_boolean(v)) {
        snprintf(err->msg, sizeof err->msg, "field '%s' must be a boolean", key);
        return false;
    }
    *out = json_is_true(v);
    if (present)
        *present = true;
    return true;
}

json_t *kvr_json_u64_num(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return json_string(buf);
}

json_t *kvr_json_u64_reply(uint64_t v)
{
    return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : kvr_json_u64_marker(v);
}
