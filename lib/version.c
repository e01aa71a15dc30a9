/*
 * lib/version.c - the library version string.
 */
#include "config.h"
#include "lib/internal.h"

const char *mf_version(void) { return PACKAGE_VERSION; }
