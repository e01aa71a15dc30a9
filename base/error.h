/*
 * base/error.h - recording errors for mf_last_error (not installed).
 *
 * The base layer sits under everything else (doc/design.md, "Layers"):
 * collectives, backends and the core all report failures through it.
 */
#ifndef MPIFLOW_BASE_ERROR_H
#define MPIFLOW_BASE_ERROR_H

#include "mpiflow/status.h"

mf_status mfi_error(mf_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "prefix: " context to the current message and returns its status. */
mf_status mfi_error_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define MF_FAIL(st, ...) return mfi_error((st), __VA_ARGS__)
#define MF_TRY(expr)                                 \
    do {                                             \
        mf_status mf_try_st_ = (expr);               \
        if (mf_try_st_ != MF_OK) return mf_try_st_;  \
    } while (0)
/* With a local `mf_status st` and an `out:` label. */
#define MF_TRY_OUT(expr)                  \
    do {                                  \
        st = (expr);                      \
        if (st != MF_OK) goto out;        \
    } while (0)
#define MF_FAIL_OUT(s, ...)                          \
    do {                                             \
        st = mfi_error((s), __VA_ARGS__);            \
        goto out;                                    \
    } while (0)

#endif
