/* kvr_json_text_lossy: see json_text.h. */
#include "util/json_text.h"

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
