/* kvr_version(): the library's own version, compiled in from version.h, so
 * a program linked against libkvrouter.so can tell which library it got
 * (`kvrouter --version`, /health and kvr_build_info report it). */
#include "kvrouter/version.h"

const char *kvr_version(void)
{
    return KVR_VERSION_STRING;
}
