/*
 * base/json.h - a JSON reader and the writer's string escaping (not
 * installed). The reader builds a tree of values from text that need not
 * end in a NUL, follows RFC 8259 strictly (no comments, no trailing
 * commas, no NaN), decodes \uXXXX escapes (surrogate pairs included) to
 * UTF-8, and reports the first error with its line and column. Nesting
 * is limited to 64 levels. Plans (doc/plans.md), safetensors headers and
 * Hugging Face config files are read with it.
 */
#ifndef MPIFLOW_BASE_JSON_H
#define MPIFLOW_BASE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum mfi_json_type {
    MFI_JSON_NULL,
    MFI_JSON_BOOL,
    MFI_JSON_NUMBER,
    MFI_JSON_STRING,
    MFI_JSON_ARRAY,
    MFI_JSON_OBJECT
} mfi_json_type;

typedef struct mfi_json mfi_json;
struct mfi_json {
    mfi_json_type type;
    int line, col;        /* where the value starts in the text, from 1 (col in bytes) */
    bool b;               /* BOOL */
    double num;           /* NUMBER */
    bool is_int;          /* NUMBER: an integer literal that fits int64 ... */
    int64_t i;            /* ... and its exact value */
    char *str;            /* STRING: NUL-terminated UTF-8 (len bytes; may hold \u0000) */
    size_t len;
    int n;                /* ARRAY, OBJECT: the count */
    char **keys;          /* OBJECT: the keys, in the text's order */
    mfi_json **items;     /* ARRAY, OBJECT: the values */
};

/* The tree of the JSON value that makes up text[0 .. len): NULL on an
 * error, with "line L, column C: what is wrong" in err. */
mfi_json *mfi_json_parse(const char *text, size_t len, char *err, size_t errsize);
void mfi_json_free(mfi_json *v);

/* An object's value for key (the first, if the key repeats), or NULL
 * when v is not an object or has no such key. */
const mfi_json *mfi_json_get(const mfi_json *v, const char *key);
/* "null", "a boolean", "a number", "a string", "an array", "an object" */
const char *mfi_json_type_name(mfi_json_type t);

/* Writes s as a JSON string, quotes included. */
void mfi_json_write_string(FILE *f, const char *s);

#endif
