/*
 * tests/test_plan.c - parallel plans (include/mpiflow/plan.h): name
 * patterns, the JSON form read and written back byte for byte, every
 * refusal with the message it must give, and a plan applied to an MLP
 * on the world (make check: 1 rank; tests/global.sh: 2, 3 and 4) and
 * on two pipeline stages, with each parameter's SBP checked against the
 * rule that must give it.
 */
#include <stdlib.h>
#include "tests/test_util.h"

START_TEST(patterns)
{
    static const struct {
        const char *pat, *name;
        bool match;
    } cases[] = {
        {"*.attn.c_attn.*", "transformer.h.0.attn.c_attn.weight", true},
        {"*.attn.c_attn.*", "transformer.h.0.attn.c_proj.weight", false},
        {"transformer.h.*.mlp.c_fc.bias", "transformer.h.11.mlp.c_fc.bias", true},
        {"hidden.weight", "hidden.weight", true},
        {"hidden.weight", "hidden.weights", false},
        {"hidden.weight", "xhidden.weight", false},
        {"layers.?.bias", "layers.3.bias", true},
        {"layers.?.bias", "layers.13.bias", false},
        {"*", "anything.at.all", true},
        {"**.weight", "a.weight", true},
        {"*a*b*c", "xxaxxbxxbxxc", true},
        {"*a*b*c", "xxaxxbxxcxxd", false},
        {"", "", true},
        {"", "x", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        ck_assert_msg(mf_plan_match(cases[i].pat, cases[i].name) == cases[i].match, "'%s' against '%s': expected %s",
                      cases[i].pat, cases[i].name, cases[i].match ? "a match" : "none");
}
END_TEST

static const char *full_plan =
    "{\"description\": \"Megatron-style\",\n"
    " \"mesh\": {\"names\": [\"dp\", \"tp\"], \"shape\": [-1, 2]},\n"
    " \"params\": [{\"match\": \"*.attn.c_attn.*\", \"sbp\": {\"tp\": \"S(1)\"}},\n"
    "            {\"match\": \"*.mlp.c_proj.weight\", \"sbp\": \"B,S(1)\"}],\n"
    " \"zero\": {\"stage\": 3},\n"
    " \"recompute\": [\"transformer.h.*\", \"conv2\"],\n"
    " \"activations\": [{\"module\": \"transformer.h.*\", \"input\": {\"tp\": \"S(1)\"}, \"output\": \"B,S(1)\"}],\n"
    " \"data\": {\"dp\": \"S(0)\"},\n"
    " \"pipeline\": {\"cuts\": [4, \"transformer.h.6\"], \"micro_batches\": 8, \"schedule\": \"gpipe\"}}\n";

/* the plan's written form, in a malloc'd string */
static char *written(const mf_plan *p)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ck_assert_ok(mf_plan_write(p, f));
    long n = ftell(f);
    char *s = malloc((size_t)n + 1);
    rewind(f);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), n);
    s[n] = 0;
    fclose(f);
    return s;
}

START_TEST(json_round_trip)
{
    mf_plan *p = mf_plan_parse(full_plan, strlen(full_plan), "full.json");
    ck_assert_msg(p != NULL, "%s", mf_last_error());
    ck_assert_int_eq(mf_plan_mesh_ndim(p), 2);
    ck_assert_str_eq(mf_plan_mesh_name(p, 1), "tp");
    ck_assert_int_eq(mf_plan_mesh_find(p, "dp"), 0);
    ck_assert_int_eq(mf_plan_mesh_size(p, 0, 8), 4);   /* -1: what 8 ranks leave */
    ck_assert_int_eq(mf_plan_mesh_size(p, 1, 8), 2);
    ck_assert_int_eq(mf_plan_mesh_size(p, 0, 3), -1);   /* 3 ranks do not fit tp=2 */
    ck_assert_int_eq(mf_plan_num_rules(p), 2);
    ck_assert_int_eq(mf_plan_zero_stage(p), 3);
    ck_assert_int_eq(mf_plan_zero_dim(p), 0);
    ck_assert_int_eq(mf_plan_pipeline_stages(p), 3);   /* two cuts */
    ck_assert_str_eq(mf_plan_pipeline_cuts(p), "4,transformer.h.6");
    ck_assert_int_eq(mf_plan_micro_batches(p), 8);
    ck_assert_str_eq(mf_plan_schedule(p), "gpipe");
    ck_assert(mf_plan_recomputes(p, "transformer.h.3") && mf_plan_recomputes(p, "conv2") && !mf_plan_recomputes(p, "fc1"));
    char data[64];
    ck_assert_ok(mf_plan_data_sbp(p, data, sizeof data));
    ck_assert_str_eq(data, "S(0),B");
    /* written, read back and written again: the same bytes */
    char *a = written(p);
    mf_plan *q = mf_plan_parse(a, strlen(a), "written");
    ck_assert_msg(q != NULL, "%s\n%s", a, mf_last_error());
    char *b = written(q);
    ck_assert_msg(!strcmp(a, b), "first:\n%s\nsecond:\n%s", a, b);
    ck_assert_msg(strstr(a, "{\"match\": \"*.attn.c_attn.*\", \"sbp\": {\"tp\": \"S(1)\"}}") &&
                  strstr(a, "\"cuts\": [4, \"transformer.h.6\"]"), "%s", a);
    free(a);
    free(b);
    mf_plan_destroy(q);
    mf_plan_destroy(p);
    /* the empty plan: data parallel over every rank */
    p = mf_plan_parse("{}", 2, "empty");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mf_plan_mesh_size(p, 0, 3), 3);
    ck_assert_ok(mf_plan_data_sbp(p, data, sizeof data));
    ck_assert_str_eq(data, "S(0)");
    mf_plan_destroy(p);
}
END_TEST

START_TEST(bad_plans)
{
    static const struct {
        const char *text, *msg1, *msg2;
        mf_status st;
    } bad[] = {
        {"{\"mesh\": {\"names\": [\"dp\"], \"shape\": [2]},\n \"params\": [}", "bad.json is not JSON", "line 2, column 13",
         MF_ERR_FORMAT},
        {"[1]", "a plan is a JSON object", "not an array", MF_ERR_ARG},
        {"{\"mesh\": {}, \"zeroo\": 1}", "line 1, column 23", "unknown key \"zeroo\"", MF_ERR_ARG},
        {"{\"mesh\": {\"names\": [\"dp\", \"dp\"], \"shape\": [2, 2]}}", "mesh", "'dp' is used twice", MF_ERR_ARG},
        {"{\"mesh\": {\"names\": [\"a\", \"b\"], \"shape\": [-1, -1]}}", "mesh", "only one dimension may have size -1",
         MF_ERR_ARG},
        {"{\"mesh\": {\"names\": [\"a\"], \"shape\": [0]}}", "mesh", "size 0", MF_ERR_ARG},
        {"{\"mesh\": {\"names\": [\"a\", \"b\"], \"shape\": [2]}}", "mesh", "2 names and 1 sizes", MF_ERR_ARG},
        {"{\"params\": [{\"match\": \"x\", \"sbp\": \"S(q)\"}]}", "params[0]", "'S(q)'", MF_ERR_ARG},
        {"{\"params\": [{\"match\": \"x\", \"sbp\": {\"tp\": \"S(1)\"}}]}", "params[0] (\"x\")",
         "names dimension 'tp', but the mesh has dp", MF_ERR_ARG},
        {"{\"params\": [{\"match\": \"x\", \"sbp\": \"B,B\"}]}", "params[0]", "has 2 entries but the mesh has 1",
         MF_ERR_ARG},
        {"{\"params\": [{\"sbp\": \"B\"}]}", "params[0]", "needs \"match\"", MF_ERR_ARG},
        {"{\"zero\": 4}", "zero", "integer from 0 to 3", MF_ERR_ARG},
        {"{\"zero\": {\"stage\": 2, \"dim\": \"data\"}}", "ZeRO-2 is over dimension 'data'", "does not have", MF_ERR_ARG},
        {"{\"recompute\": \"block\"}", "recompute", "is a string, not an array", MF_ERR_ARG},
        {"{\"pipeline\": {\"stages\": 3, \"cuts\": [4]}}", "pipeline.cuts", "1 cuts make 2 stages, but \"stages\" is 3",
         MF_ERR_ARG},
        {"{\"pipeline\": {\"schedule\": \"zigzag\"}}", "pipeline", "zigzag", MF_ERR_ARG},
        {"{\"activations\": [{\"module\": \"h.*\"}]}", "activations[0]", "\"input\" or \"output\"", MF_ERR_ARG},
        {"{\"data\": {\"dp\": \"S(0)\", \"dp\": \"B\"}}", "data", "names dimension 'dp' twice", MF_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mf_plan *p = mf_plan_parse(bad[i].text, strlen(bad[i].text), "bad.json");
        ck_assert_msg(p == NULL, "plan %zu was read: %s", i, bad[i].text);
        const char *e = mf_last_error();
        ck_assert_msg(mf_last_status() == bad[i].st && strstr(e, "bad.json") && strstr(e, bad[i].msg1) &&
                          strstr(e, bad[i].msg2),
                      "plan %zu: status %d, message '%s'; wanted '%s' and '%s'", i, mf_last_status(), e, bad[i].msg1,
                      bad[i].msg2);
    }
    ck_assert_fails(mf_plan_load("/nonexistent/plan.json"), MF_ERR_IO, "cannot open plan /nonexistent/plan.json");
    mf_plan *p = mf_plan_create();
    ck_assert_fails(mf_plan_add_rule(p, "x", "tp=S(1),B"), MF_ERR_ARG, "mixes entries by name");
    ck_assert_fails(mf_plan_set_zero(p, 5, NULL), MF_ERR_ARG, "ZeRO stage 5");
    ck_assert_fails(mf_plan_set_pipeline(p, 0, NULL, 0, NULL), MF_ERR_ARG, "0 stages");
    mf_plan_destroy(p);
}
END_TEST

/* a plan on an MLP (hidden.weight [60, 20], hidden.bias [60],
 * output.weight [10, 60], output.bias [10]) on the world as mesh (rest, 1) */
static mf_plan *mlp_plan(const char *rules_json)
{
    char text[1000];
    snprintf(text, sizeof text, "{\"mesh\": {\"names\": [\"dp\", \"tp\"], \"shape\": [-1, 1]}, \"params\": [%s]}",
             rules_json);
    mf_plan *p = mf_plan_parse(text, strlen(text), "mlp.json");
    ck_assert_msg(p != NULL, "%s", mf_last_error());
    return p;
}

START_TEST(apply_to_mlp)
{
    int n = mf_world_size();
    mf_module *m = mf_model_mlp(20, 60, 10);
    ck_assert_ok(mf_module_reset_parameters(m, 7));
    mf_plan *p = mlp_plan("{\"match\": \"hidden.weight\", \"sbp\": {\"dp\": \"S(0)\"}}, {\"match\": \"*.bias\", \"sbp\": \"B,S(0)\"}");
    ck_assert_ok(mf_plan_set_zero(p, 3, "dp"));
    mf_placement *pl = mf_plan_placement(p, 0, n, MF_DEV_CPU);
    ck_assert_ptr_nonnull(pl);
    ck_assert_int_eq(mf_placement_mesh_dim(pl, 0), n);
    /* by rule, then ZeRO-3 on dp for what stays B there: the largest axis
     * the rule leaves whole (tp splits nothing here, its size is 1) */
    static const struct {
        const char *name, *sbp;
        int rule;
    } want[] = {{"hidden.weight", "S(0),B", 0}, {"hidden.bias", "S(0),S(0)", 1}, {"output.weight", "S(1),B", -1},
                {"output.bias", "S(0),S(0)", 1}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        mf_tensor *t = mf_module_get(m, want[i].name);
        char sbp[64];
        int rule = -9;
        ck_assert_ok(mf_plan_param_sbp(p, pl, want[i].name, mf_tensor_ndim(t), mf_tensor_shape(t), sbp, sizeof sbp, &rule));
        ck_assert_msg(!strcmp(sbp, want[i].sbp) && rule == want[i].rule, "%s: %s by rule %d, wanted %s by rule %d",
                      want[i].name, sbp, rule, want[i].sbp, want[i].rule);
    }
    /* applied: the parameters are global with those SBPs and hold the
     * same values as before */
    mf_tensor *before = mf_clone(mf_module_get(m, "output.weight"));
    ck_assert_ok(mf_plan_apply(p, m, pl));
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        mf_tensor *t = mf_module_get(m, want[i].name);
        char sbp[64];
        ck_assert(mf_tensor_is_global(t));
        mf_global_sbp_str(t, sbp, sizeof sbp);
        ck_assert_msg(!strcmp(sbp, want[i].sbp), "%s is %s, not %s", want[i].name, sbp, want[i].sbp);
    }
    mf_tensor *full = mf_global_gather(mf_module_get(m, "output.weight"));
    ck_assert(mf_test_max_diff(full, before, false) == 0);
    /* the printed form names every parameter, its SBP and its rule */
    FILE *f = tmpfile();
    ck_assert_ok(mf_plan_print(p, m, pl, f));
    char text[4000] = "";
    rewind(f);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    ck_assert_msg(strstr(text, "ZeRO-3 over dp") && strstr(text, "rule 0 \"hidden.weight\"") &&
                  strstr(text, "rule 1 \"*.bias\"") && strstr(text, "no rule (B), ZeRO-3 on dp") &&
                  strstr(text, "output.bias"), "%s", text);
    mf_tensor_destroy(before);
    mf_tensor_destroy(full);
    mf_placement_destroy(pl);
    mf_plan_destroy(p);
    mf_module_destroy(m);
}
END_TEST

START_TEST(bad_applications)
{
    int n = mf_world_size();
    mf_module *m = mf_model_mlp(20, 60, 10);
    ck_assert_ok(mf_module_reset_parameters(m, 7));
    /* a rule that matches nothing, and one an earlier rule hides */
    mf_plan *p = mlp_plan("{\"match\": \"hidden.weights\", \"sbp\": \"B,B\"}");
    mf_placement *pl = mf_plan_placement(p, 0, n, MF_DEV_CPU);
    ck_assert_fails(mf_plan_apply(p, m, pl), MF_ERR_ARG, "plan rule 0 (\"hidden.weights\" -> B,B) matches no parameter",
                       "such as \"hidden.weight\"");
    mf_plan_destroy(p);
    p = mlp_plan("{\"match\": \"*\", \"sbp\": \"B,B\"}, {\"match\": \"output.*\", \"sbp\": \"B,B\"}");
    ck_assert_fails(mf_plan_apply(p, m, pl), MF_ERR_ARG, "plan rule 1 (\"output.*\" -> B,B) never applies",
                       "rule 0 takes output.weight first");
    mf_plan_destroy(p);
    mf_placement_destroy(pl);
    /* a split that does not divide the axis is balanced (10 classes over
     * 3 or 4 ranks); one that leaves a rank nothing is refused */
    p = mlp_plan("{\"match\": \"output.weight\", \"sbp\": {\"dp\": \"S(0)\"}}");
    pl = mf_plan_placement(p, 0, n, MF_DEV_CPU);
    char sbp[64];
    ck_assert_ok(mf_plan_param_sbp(p, pl, "output.weight", 2, (const int64_t[]){10, 60}, sbp, sizeof sbp, NULL));
    ck_assert_str_eq(sbp, "S(0),B");
    if (n > 1)
        ck_assert_fails(mf_plan_param_sbp(p, pl, "output.weight", 2, (const int64_t[]){1, 60}, sbp, sizeof sbp, NULL),
                        MF_ERR_ARG, "plan rule 0 (\"output.weight\") splits axis 0 of parameter output.weight (size 1)",
                        "along 'dp': some ranks would hold none of it");
    mf_plan_destroy(p);
    mf_placement_destroy(pl);
    /* an axis the parameter lacks; a P parameter */
    p = mlp_plan("{\"match\": \"output.bias\", \"sbp\": \"S(1),B\"}");
    pl = mf_plan_placement(p, 0, n, MF_DEV_CPU);
    ck_assert_fails(mf_plan_apply(p, m, pl), MF_ERR_ARG, "splits axis 1 of parameter output.bias, which has 1");
    mf_plan_destroy(p);
    p = mlp_plan("{\"match\": \"output.bias\", \"sbp\": \"P,B\"}");
    ck_assert_fails(mf_plan_apply(p, m, pl), MF_ERR_ARG, "makes parameter output.bias P (a partial sum) along 'dp'");
    mf_plan_destroy(p);
    mf_placement_destroy(pl);
    /* a mesh that does not fit the rank count */
    const char *names[] = {"dp", "tp"};
    p = mf_plan_create();
    ck_assert_ok(mf_plan_set_mesh(p, 2, names, (const int[]){-1, n + 1}));
    ck_assert_fails(mf_plan_placement(p, 0, n, MF_DEV_CPU), MF_ERR_ARG, "the plan's mesh dp=? x tp=", "does not fit");
    mf_plan_destroy(p);
    mf_module_destroy(m);
}
END_TEST

/* a pipeline of two stages (ranks 0 .. n/2-1 and the rest): hidden on
 * the first, output on the second, each by the rules */
START_TEST(apply_to_stages)
{
    int n = mf_world_size();
    if (n < 2) return;   /* two stages need two ranks: tests/global.sh runs 2 to 4 */
    mf_module *m = mf_model_mlp(20, 60, 10);
    ck_assert_ok(mf_module_reset_parameters(m, 7));
    mf_plan *p = mlp_plan("{\"match\": \"*.weight\", \"sbp\": {\"dp\": \"S(0)\"}}");
    ck_assert_ok(mf_plan_set_pipeline(p, 2, "2", 0, NULL));
    int k = n / 2;
    mf_placement *st[2] = {mf_plan_placement(p, 0, k, MF_DEV_CPU), mf_plan_placement(p, k, n - k, MF_DEV_CPU)};
    ck_assert(st[0] && st[1]);
    const int first[3] = {0, 2, 4};   /* flatten, hidden | relu, output */
    ck_assert_ok(mf_plan_apply_pipeline(p, m, 2, first, st));
    static const struct {
        const char *name, *sbp;
        int stage;
    } want[] = {{"hidden.weight", "S(0),B", 0}, {"hidden.bias", "B,B", 0}, {"output.weight", "S(0),B", 1},
                {"output.bias", "B,B", 1}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        mf_tensor *t = mf_module_get(m, want[i].name);
        char sbp[64];
        mf_global_sbp_str(t, sbp, sizeof sbp);
        ck_assert_msg(!strcmp(sbp, want[i].sbp) && mf_placement_equal(mf_global_placement(t), st[want[i].stage]),
                      "%s: %s, wanted %s on stage %d", want[i].name, sbp, want[i].sbp, want[i].stage);
    }
    mf_placement_destroy(st[0]);
    mf_placement_destroy(st[1]);
    mf_plan_destroy(p);
    mf_module_destroy(m);
}
END_TEST

static Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, patterns);
    tcase_add_test(tc, json_round_trip);
    tcase_add_test(tc, bad_plans);
    tcase_add_test(tc, apply_to_mlp);
    tcase_add_test(tc, bad_applications);
    tcase_add_test(tc, apply_to_stages);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return mf_test_main(argc, argv, plan_suite); }
