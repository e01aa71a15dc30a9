/*
 * tests/test_base.c - the base layer, linked against base/ alone: the
 * address map (base/ptrmap.h), whose adds, lookups and removals are
 * checked against a plain array through growth and long probe runs; and
 * the JSON reader (base/json.h) on every kind of value, on escapes and
 * on each way a text can be malformed.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "base/json.h"
#include "base/ptrmap.h"

enum { N = 3000 };

/* Addresses that share low bits, so probe runs are long and wrap. */
static const void *addr(int i) { return (const void *)(uintptr_t)(0x1000 + (uintptr_t)i * 4096); }

START_TEST(add_find_remove)
{
    static int want[N];   /* -1: absent */
    mfi_ptr_map m = {0};
    for (int i = 0; i < N; i++) {
        *mfi_ptr_map_at(&m, addr(i), true) = i + 1;
        want[i] = i + 1;
    }
    ck_assert_uint_eq(m.n, N);
    ck_assert_uint_ge(m.cap, 2 * N);
    uint64_t x = 12345;   /* remove in a scrambled order, checking all after some */
    for (int round = 0; round < 2 * N; round++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int i = (int)((x >> 33) % N);
        bool had = want[i] >= 0;
        ck_assert(mfi_ptr_map_remove(&m, addr(i)) == had);
        want[i] = -1;
        if (round % 250 == 0 || round == 2 * N - 1) {
            size_t live = 0;
            for (int j = 0; j < N; j++) {
                int *v = mfi_ptr_map_at(&m, addr(j), false);
                if (want[j] < 0) ck_assert_ptr_null(v);
                else {
                    ck_assert_ptr_nonnull(v);
                    ck_assert_int_eq(*v, want[j]);
                    live++;
                }
            }
            ck_assert_uint_eq(m.n, live);
        }
    }
    ck_assert(!mfi_ptr_map_remove(&m, addr(N + 1)));   /* never there */
    *mfi_ptr_map_at(&m, addr(7), true) = 70;          /* reusable after removals */
    ck_assert_int_eq(*mfi_ptr_map_at(&m, addr(7), false), 70);
    mfi_ptr_map_free(&m);
    ck_assert_uint_eq(m.n, 0);
    ck_assert(!mfi_ptr_map_remove(&m, addr(7)));   /* empty map */
}
END_TEST

/* ------------------------------------------------------------- JSON */
static mfi_json *parse(const char *text)
{
    char err[300];
    mfi_json *v = mfi_json_parse(text, strlen(text), err, sizeof err);
    ck_assert_msg(v != NULL, "%s: %s", text, err);
    return v;
}

START_TEST(json_values)
{
    const char *text = "{\"a\": [1, -2, 9007199254740993, 1.5e3, 1.0, 0, -0.25],\n"
                       " \"s\": \"q\\\"\\\\/\\n\\u00e9\\ud83d\\ude00\\u0000z\",\n"
                       "  \"t\": true, \"f\": false, \"z\": null, \"o\": {}, \"e\": [], \"a\": 2}";
    mfi_json *v = parse(text);
    ck_assert_int_eq(v->type, MFI_JSON_OBJECT);
    ck_assert_int_eq(v->n, 8);
    const mfi_json *a = mfi_json_get(v, "a");   /* the first of a repeated key */
    ck_assert_int_eq(a->type, MFI_JSON_ARRAY);
    ck_assert_int_eq(a->n, 7);
    ck_assert(a->items[0]->is_int && a->items[0]->i == 1);
    ck_assert(a->items[1]->is_int && a->items[1]->i == -2);
    ck_assert(a->items[2]->is_int && a->items[2]->i == 9007199254740993LL);   /* exact beyond 2^53 */
    ck_assert(!a->items[3]->is_int && a->items[3]->num == 1500.0);
    ck_assert(!a->items[4]->is_int && a->items[4]->num == 1.0);
    ck_assert(a->items[5]->is_int && a->items[5]->i == 0);
    ck_assert(a->items[6]->num == -0.25);
    const mfi_json *s = mfi_json_get(v, "s");
    ck_assert_int_eq(s->type, MFI_JSON_STRING);
    const char want[] = "q\"\\/\n\xc3\xa9\xf0\x9f\x98\x80\0z";
    ck_assert_uint_eq(s->len, sizeof want - 1);
    ck_assert(!memcmp(s->str, want, sizeof want));
    ck_assert_int_eq(s->line, 2);
    ck_assert_int_eq(s->col, 7);
    ck_assert(mfi_json_get(v, "t")->b && !mfi_json_get(v, "f")->b);
    ck_assert_int_eq(mfi_json_get(v, "z")->type, MFI_JSON_NULL);
    ck_assert_int_eq(mfi_json_get(v, "o")->n, 0);
    ck_assert_int_eq(mfi_json_get(v, "e")->type, MFI_JSON_ARRAY);
    ck_assert_ptr_null(mfi_json_get(v, "missing"));
    ck_assert_ptr_null(mfi_json_get(a, "a"));   /* not an object */
    ck_assert_str_eq(mfi_json_type_name(MFI_JSON_OBJECT), "an object");
    mfi_json_free(v);
    /* the text need not end in a NUL: only len bytes are read */
    char err[200];
    v = mfi_json_parse("[1, 2]]]", 6, err, sizeof err);
    ck_assert_msg(v && v->n == 2, "%s", err);
    mfi_json_free(v);
    /* the writer's strings read back as they were */
    const char *odd = "tab\there \"quoted\" back\\slash\nnew \x01 \xc3\xa9";
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    mfi_json_write_string(f, odd);
    char buf[200];
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    v = mfi_json_parse(buf, n, err, sizeof err);
    ck_assert_msg(v && v->type == MFI_JSON_STRING && !strcmp(v->str, odd), "%.*s: %s", (int)n, buf, err);
    mfi_json_free(v);
}
END_TEST

START_TEST(json_errors)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"", "line 1, column 1: expected a value, found the end"},
        {"[1, 2,]", "line 1, column 7: a ',' before ']'"},
        {"{\"a\" 1}", "line 1, column 6: expected ':' after the key \"a\", found '1'"},
        {"{\"a\": 1,\n 2}", "line 2, column 2: expected a key (a string) in the object opened at line 1, column 1"},
        {"[1 2]", "line 1, column 4: expected ',' or ']' in the array opened at line 1, column 1, found '2'"},
        {"\"abc", "line 1, column 1: a string is not closed"},
        {"\"a\\qb\"", "line 1, column 3: a bad escape in a string (\\q)"},
        {"\"\\ud800x\"", "column 2: \\uD800 is half of a surrogate pair"},
        {"\"\\udc00\"", "\\uDC00 is half of a surrogate pair"},
        {"\"a\nb\"", "line 1, column 3: a control character (0x0A)"},
        {"01", "line 1, column 2: '1' after the JSON value"},
        {"-", "a number has no digits"},
        {"1.", "no digits after its '.'"},
        {"1e+", "no digits in its exponent"},
        {"NaN", "expected a value, found 'N'"},
        {"tru", "expected a value, found 't'"},
        {"{} x", "line 1, column 4: 'x' after the JSON value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[300] = "untouched";
        mfi_json *v = mfi_json_parse(bad[i].text, strlen(bad[i].text), err, sizeof err);
        ck_assert_msg(v == NULL, "'%s' was read", bad[i].text);
        ck_assert_msg(strstr(err, bad[i].msg), "'%s': the message is '%s', not '%s'", bad[i].text, err, bad[i].msg);
    }
    /* nesting: 64 levels read, 65 refused */
    char deep[200];
    for (int depth = 64; depth <= 65; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        char err[300];
        mfi_json *v = mfi_json_parse(deep, 2 * (size_t)depth, err, sizeof err);
        if (depth == 64) ck_assert_msg(v != NULL, "%s", err);
        else ck_assert_msg(!v && strstr(err, "deeper than 64"), "65 levels: %s", v ? "read" : err);
        mfi_json_free(v);
    }
    mfi_json *v = mfi_json_parse("[1]", 3, NULL, 0);   /* no room for a message: still fine */
    ck_assert_ptr_nonnull(v);
    mfi_json_free(v);
    ck_assert_ptr_null(mfi_json_parse("[1", 2, NULL, 0));
}
END_TEST

static Suite *base_suite(void)
{
    Suite *s = suite_create("base");
    TCase *tc = tcase_create("ptrmap");
    tcase_add_test(tc, add_find_remove);
    suite_add_tcase(s, tc);
    tc = tcase_create("json");
    tcase_add_test(tc, json_values);
    tcase_add_test(tc, json_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(base_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
