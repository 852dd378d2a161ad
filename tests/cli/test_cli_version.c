/* `kvrouter --version`: operators and packaging scripts read it, so it must
 * print the version CMake's project(VERSION) gave the headers and the
 * library, on one line, and exit 0; and the version must be well formed. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/version.h"

static void version_prints_project_version(void **state)
{
    (void)state;
    char cmd[4096], want[64];
    const char *flags[] = {"--version", "-V"};
    snprintf(want, sizeof want, "kvrouter %s\n", KVR_VERSION_STRING);
    for (size_t i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "'%s' %s", kvr_test_binary(), flags[i]);
        int status;
        char *out = kvr_test_run(cmd, &status);
        assert_int_equal(status, 0);
        assert_string_equal(out, want);
        free(out);
    }
}

static void help_mentions_version(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --help", kvr_test_binary());
    int status;
    char *out = kvr_test_run(cmd, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "kvrouter --version"));
    free(out);
}

static void library_and_header_versions_agree(void **state)
{
    (void)state;
    assert_string_equal(kvr_version(), KVR_VERSION_STRING);
    char parts[64];
    snprintf(parts, sizeof parts, "%d.%d.%d", KVR_VERSION_MAJOR, KVR_VERSION_MINOR,
             KVR_VERSION_PATCH);
    assert_string_equal(parts, KVR_VERSION_STRING);
    assert_int_equal(KVR_VERSION, KVR_MAKE_VERSION(KVR_VERSION_MAJOR, KVR_VERSION_MINOR,
                                                   KVR_VERSION_PATCH));
    assert_true(KVR_MAKE_VERSION(0, 10, 0) > KVR_MAKE_VERSION(0, 9, 99));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version_prints_project_version),
        cmocka_unit_test(help_mentions_version),
        cmocka_unit_test(library_and_header_versions_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
