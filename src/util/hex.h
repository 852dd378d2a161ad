/* Hex digit value, shared by every parser of hex text (payload hex in
 * `kvrouter decode`, mm_hash strings in requests, test fixtures). */
#ifndef KVR_UTIL_HEX_H
#define KVR_UTIL_HEX_H

/* 0..15, or -1 when c is not a hex digit (either case). */
static inline int kvr_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
