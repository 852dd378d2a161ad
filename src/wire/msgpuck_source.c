/* msgpuck's out-of-line functions and parser tables, compiled from the
 * Debian package's header the way msgpuck documents it (MP_SOURCE defined
 * in a single compilation unit). Debian's libmsgpuck.a is not
 * position-independent, so libkvrouter.so cannot link it; compiled here they
 * are PIC like the rest of the library, and hidden like every internal
 * symbol. */
#define MP_SOURCE 1
#include "wire/wire_internal.h"
