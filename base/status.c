/*
 * base/status.c - the per-thread last-error message behind mf_last_error.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "base/error.h"

#define MSG_MAX 2048

static _Thread_local char err_msg[MSG_MAX];
static _Thread_local mf_status err_status = MF_OK;

mf_status mfi_error(mf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    err_status = st;
    return st;
}

mf_status mfi_error_context(const char *fmt, ...)
{
    char prefix[512], old[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof err_msg - 3) n = sizeof err_msg - 3;
    memcpy(err_msg, prefix, n);
    memcpy(err_msg + n, ": ", 2);
    size_t rest = sizeof err_msg - n - 3;
    size_t m = strlen(old);
    if (m > rest) m = rest;
    memcpy(err_msg + n + 2, old, m);
    err_msg[n + 2 + m] = '\0';
    if (err_status == MF_OK) err_status = MF_ERR_INTERNAL;
    return err_status;
}

const char *mf_last_error(void) { return err_msg; }
mf_status mf_last_status(void) { return err_status; }

void mf_clear_error(void)
{
    err_msg[0] = '\0';
    err_status = MF_OK;
}

const char *mf_status_string(mf_status s)
{
    switch (s) {
    case MF_OK: return "MF_OK";
    case MF_ERR_ARG: return "MF_ERR_ARG";
    case MF_ERR_SHAPE: return "MF_ERR_SHAPE";
    case MF_ERR_DTYPE: return "MF_ERR_DTYPE";
    case MF_ERR_NOMEM: return "MF_ERR_NOMEM";
    case MF_ERR_IO: return "MF_ERR_IO";
    case MF_ERR_FORMAT: return "MF_ERR_FORMAT";
    case MF_ERR_MPI: return "MF_ERR_MPI";
    case MF_ERR_BACKEND: return "MF_ERR_BACKEND";
    case MF_ERR_STATE: return "MF_ERR_STATE";
    case MF_ERR_REMOTE: return "MF_ERR_REMOTE";
    case MF_ERR_INTERNAL: return "MF_ERR_INTERNAL";
    }
    return "MF_ERR_UNKNOWN";
}
