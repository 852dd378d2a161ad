/* kvr_json_text_lossy and the UTF-8 check: see json_text.h. */
#include "util/json_text.h"

size_t kvr_utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (n == 0 || c > 0xF4)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return n;
}

bool kvr_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t n; *p; p += n)
        if ((n = kvr_utf8_len(p)) == 0)
            return false;
    return true;
}

json_t *kvr_json_text_lossy(const char *s)
{
    if (!s)
        return NULL;
    json_t *j = json_string(s);
    if (j)
        return j;
    char safe[4096];
    size_t i = 0;
    for (; s[i] && i < sizeof safe - 1; i++)
        safe[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    safe[i] = 0;
    return json_string(safe);
}
