/*
 * mpiflow/status.h - status codes and the last-error message.
 *
 * Every library function returns an mf_status (or NULL for constructors)
 * and, on failure, leaves a message for mf_last_error() that names the
 * op, tensor, file or flag at fault. The library never exits or aborts.
 */
#ifndef MPIFLOW_STATUS_H
#define MPIFLOW_STATUS_H

#if defined(__GNUC__)
#define MF_API __attribute__((visibility("default")))
#else
#define MF_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mf_status {
    MF_OK = 0,
    MF_ERR_ARG,      /* a bad argument: flag, option, NULL pointer */
    MF_ERR_SHAPE,    /* shapes that do not fit together */
    MF_ERR_DTYPE,    /* a dtype the op does not take */
    MF_ERR_NOMEM,    /* out of memory */
    MF_ERR_IO,       /* a file that cannot be opened, read or written */
    MF_ERR_FORMAT,   /* a file whose contents are not what they claim */
    MF_ERR_MPI,      /* an MPI call failed */
    MF_ERR_BACKEND,  /* the backend lacks a kernel or failed in one */
    MF_ERR_STATE,    /* a call out of order (backward twice, ...) */
    MF_ERR_REMOTE,   /* another rank failed with a status this build does not know */
    MF_ERR_INTERNAL  /* a bug in mpiflow: please report it */
} mf_status;

/* The message of the last failure on this thread ("" if none). The
 * string stays valid until the next failing call on the same thread. */
MF_API const char *mf_last_error(void);
/* The status of the last failure on this thread (MF_OK if none). */
MF_API mf_status mf_last_status(void);
/* Forget the last failure. */
MF_API void mf_clear_error(void);
/* A short constant name for a status: "MF_ERR_SHAPE". */
MF_API const char *mf_status_string(mf_status s);

#ifdef __cplusplus
}
#endif
#endif
