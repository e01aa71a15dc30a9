/*
 * lib/global/placement.c - placements: world ranks arranged as a mesh.
 *
 * Creating a placement is collective over the world (it splits the
 * world communicator), so every rank creates the same placements in the
 * same order. Identical placements are created once: a registry keeps
 * each one, with its communicators, until mf_finalize, and hands out
 * references to it.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include "lib/global/global_internal.h"

static mf_placement **registry;
static int nregistry;

void mfi_placement_coords(const mf_placement *p, int index, int *coord)
{
    for (int d = p->mesh_ndim - 1; d >= 0; d--) {
        coord[d] = index % p->mesh[d];
        index /= p->mesh[d];
    }
}

int mfi_placement_index_of(const mf_placement *p, const int *coord)
{
    int idx = 0;
    for (int d = 0; d < p->mesh_ndim; d++) idx = idx * p->mesh[d] + coord[d];
    return idx;
}

static void placement_free(mf_placement *p)
{
    if (!p) return;
    mfi_comm_free(p->comm);
    for (int d = 0; d < MF_MAX_MESH; d++) mfi_comm_free(p->dim_comm[d]);
    free(p->ranks);
    free(p);
}

static bool same_layout(const mf_placement *p, int n, const int *ranks, int nd, const int *mesh, mf_device_type dev)
{
    if (p->n != n || p->mesh_ndim != nd || p->dev != dev || p->sim != mfi_sim_on()) return false;
    for (int d = 0; d < nd; d++)
        if (p->mesh[d] != mesh[d]) return false;
    return !memcmp(p->ranks, ranks, (size_t)n * sizeof *ranks);
}

/* a simulated world's: the members and each dimension's peers, as the
 * splits below would group them */
static mf_status make_sim_comms(mf_placement *p)
{
    p->sim = true;
    if (p->index < 0) return MF_OK;
    MF_TRY(mfi_comm_sim_create(p->n, p->ranks, p->index, &p->comm));
    for (int d = 0; d < p->mesh_ndim; d++) {
        int peers[4096], c[MF_MAX_MESH];
        if (p->mesh[d] > 4096) MF_FAIL(MF_ERR_ARG, "a simulated mesh dimension of %d ranks (at most 4096)", p->mesh[d]);
        memcpy(c, p->coord, sizeof c);
        for (int k = 0; k < p->mesh[d]; k++) {
            c[d] = k;
            peers[k] = p->ranks[mfi_placement_index_of(p, c)];
        }
        MF_TRY(mfi_comm_sim_create(p->mesh[d], peers, p->coord[d], &p->dim_comm[d]));
    }
    return MF_OK;
}

/* the communicators of p: members, then one per mesh dimension */
static mf_status make_comms(mf_placement *p)
{
    if (mfi_sim_on()) return make_sim_comms(p);
    MF_TRY(mfi_comm_split(mfi_comm_world(), p->index >= 0 ? 0 : -1, p->index, &p->comm));
    if (p->index < 0) return MF_OK;
    for (int d = 0; d < p->mesh_ndim; d++) {
        /* color: the coordinates other than d */
        int color = 0;
        for (int e = 0; e < p->mesh_ndim; e++)
            if (e != d) color = color * p->mesh[e] + p->coord[e];
        MF_TRY(mfi_comm_split(p->comm, color, p->coord[d], &p->dim_comm[d]));
    }
    return MF_OK;
}

mf_status mfi_placement_layout_check(const char *what, int n, const int *ranks, int nd, const int *mesh, int world)
{
    if (n <= 0 || !ranks) MF_FAIL(MF_ERR_ARG, "%s: a placement needs at least one rank", what);
    if (nd < 1 || nd > MF_MAX_MESH || !mesh)
        MF_FAIL(MF_ERR_ARG, "%s: a mesh has 1 to %d dimensions, not %d", what, MF_MAX_MESH, nd);
    int64_t prod = 1;
    for (int d = 0; d < nd; d++) {
        if (mesh[d] < 1) MF_FAIL(MF_ERR_ARG, "%s: mesh dimension %d is %d; sizes must be >= 1", what, d, mesh[d]);
        prod *= mesh[d];
    }
    if (prod != n) MF_FAIL(MF_ERR_ARG, "%s: a mesh of %lld ranks does not fit %d ranks", what, (long long)prod, n);
    unsigned char *seen = calloc((size_t)world, 1);
    if (!seen) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= world) {
            free(seen);
            MF_FAIL(MF_ERR_ARG, "%s: rank %d is not in the world of %d ranks", what, ranks[i], world);
        }
        if (seen[ranks[i]]++) {
            free(seen);
            MF_FAIL(MF_ERR_ARG, "%s: rank %d appears twice", what, ranks[i]);
        }
    }
    free(seen);
    return MF_OK;
}

mf_placement *mf_placement_create(int n, const int *ranks, int nd, const int *mesh, mf_device_type dev)
{
    char what[64] = "mf_placement_create";
    int world = mfi_comm_size_of(mfi_comm_world());
    if (mfi_placement_layout_check(what, n, ranks, nd, mesh, world) != MF_OK) return NULL;
    if (dev != MF_DEV_CPU && dev != MF_DEV_CUDA && dev != MF_DEV_META) {
        mfi_error(MF_ERR_ARG, "%s: unknown device type %d", what, (int)dev);
        return NULL;
    }
    if ((dev == MF_DEV_META) != mfi_sim_on()) {
        mfi_error(MF_ERR_ARG, mfi_sim_on() ? "%s: in a simulated world placements are on the meta device"
                                            : "%s: a meta placement needs a simulated world (mf_simulate_begin)", what);
        return NULL;
    }
    /* a member drives its device: it must have one (one rank per GPU).
     * Agreed, so that no rank goes on into the communicator splits below
     * while another has failed. */
    if (dev != MF_DEV_CPU) {
        bool member = false;
        for (int i = 0; i < n; i++) member |= ranks[i] == mfi_comm_rank_in(mfi_comm_world());
        mf_status local = MF_OK;
        if (member && !mfi_backend_for(dev))
            local = mfi_error_context("%s: a %s placement on rank %d", what, mf_device_name(dev),
                                      mfi_comm_rank_in(mfi_comm_world()));
        if (mf_agree(local) != MF_OK) return NULL;
    }
    for (int i = 0; i < nregistry; i++)
        if (same_layout(registry[i], n, ranks, nd, mesh, dev)) return mf_placement_retain(registry[i]);

    mf_placement *p = calloc(1, sizeof *p);
    mf_placement **grown = realloc(registry, (size_t)(nregistry + 1) * sizeof *registry);
    if (grown) registry = grown;
    if (!p || !grown || !(p->ranks = malloc((size_t)n * sizeof *ranks))) {
        free(p);
        mfi_error(MF_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    p->refcount = 1;
    p->n = n;
    memcpy(p->ranks, ranks, (size_t)n * sizeof *ranks);
    p->mesh_ndim = nd;
    memcpy(p->mesh, mesh, (size_t)nd * sizeof *mesh);
    p->dev = dev;
    p->index = -1;
    int me = mfi_comm_rank_in(mfi_comm_world());
    for (int i = 0; i < n; i++)
        if (ranks[i] == me) p->index = i;
    if (p->index >= 0) mfi_placement_coords(p, p->index, p->coord);
    if (make_comms(p) != MF_OK) {
        placement_free(p);
        mfi_error_context("%s", what);
        return NULL;
    }
    registry[nregistry++] = p;
    return mf_placement_retain(p);
}

mf_placement *mf_placement_world_mesh(int nd, const int *mesh)
{
    int n = mfi_comm_size_of(mfi_comm_world());
    int *ranks = malloc((size_t)n * sizeof *ranks);
    if (!ranks) {
        mfi_error(MF_ERR_NOMEM, "mf_placement_world: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) ranks[i] = i;
    /* a simulated world's placements are on the meta device */
    mf_placement *p = mf_placement_create(n, ranks, nd, mesh, mfi_sim_on() ? MF_DEV_META : MF_DEV_CPU);
    free(ranks);
    return p;
}

mf_placement *mf_placement_world(void)
{
    int n = mfi_comm_size_of(mfi_comm_world());
    return mf_placement_world_mesh(1, &n);
}

/* "0-3", "0,2,5-7": appends to ranks (capacity cap) */
static bool parse_ranks(const char **sp, int *ranks, int *n, int cap)
{
    const char *s = *sp;
    for (;;) {
        char *end;
        long a = strtol(s, &end, 10), b;
        if (end == s || a < 0 || a > INT_MAX) return false;
        s = end;
        b = a;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a || b > INT_MAX) return false;
            s = end;
        }
        for (long r = a; r <= b; r++) {
            if (*n >= cap) return false;
            ranks[(*n)++] = (int)r;
        }
        if (*s != ',') break;
        s++;
    }
    *sp = s;
    return true;
}

mf_status mfi_placement_text(const char *text, int *ranks, int cap, int *n, int *nd, int *mesh, mf_device_type *dev)
{
    *n = *nd = 0;
    *dev = MF_DEV_CPU;
    const char *s = text ? text : "";
    bool ok = true;
    while (isspace((unsigned char)*s)) s++;
    ok = parse_ranks(&s, ranks, n, cap);
    while (ok && isspace((unsigned char)*s)) s++;
    if (ok && !strncmp(s, "mesh", 4)) {
        s += 4;
        while (isspace((unsigned char)*s)) s++;
        do {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s || *nd == MF_MAX_MESH || v < 1 || v > cap) {
                ok = false;
                break;
            }
            mesh[(*nd)++] = (int)v;
            s = end;
        } while (*s == 'x' && s++);
        while (isspace((unsigned char)*s)) s++;
    } else if (ok) {
        mesh[(*nd)++] = *n;
    }
    if (ok && !strncmp(s, "cuda", 4)) {
        *dev = MF_DEV_CUDA;
        s += 4;
    } else if (ok && !strncmp(s, "meta", 4)) {
        *dev = MF_DEV_META;
        s += 4;
    } else if (ok && !strncmp(s, "cpu", 3)) {
        s += 3;
    }
    while (ok && isspace((unsigned char)*s)) s++;
    if (!ok || *s)
        MF_FAIL(MF_ERR_ARG, "cannot read placement '%s' (expected ranks like \"0-3\" or \"0,2,4,6\", then optionally "
                "\"mesh 2x2\" and a device \"cpu\" or \"cuda\")", text ? text : "");
    return MF_OK;
}

mf_placement *mf_placement_parse(const char *text)
{
    if (!text) {
        mfi_error(MF_ERR_ARG, "mf_placement_parse: text is NULL");
        return NULL;
    }
    int *ranks = malloc(MFI_PLACEMENT_TEXT_CAP * sizeof *ranks), n = 0, nd = 0, mesh[MF_MAX_MESH];
    mf_device_type dev = MF_DEV_CPU;
    if (!ranks) {
        mfi_error(MF_ERR_NOMEM, "mf_placement_parse: out of memory");
        return NULL;
    }
    if (mfi_placement_text(text, ranks, MFI_PLACEMENT_TEXT_CAP, &n, &nd, mesh, &dev) != MF_OK) {
        free(ranks);
        mfi_error_context("mf_placement_parse");
        return NULL;
    }
    mf_placement *p = mf_placement_create(n, ranks, nd, mesh, dev);
    free(ranks);
    if (!p) mfi_error_context("placement '%s'", text);
    return p;
}

mf_placement *mf_placement_retain(mf_placement *p)
{
    if (p) p->refcount++;
    return p;
}

void mf_placement_destroy(mf_placement *p)
{
    if (p && --p->refcount == 0) placement_free(p);
}

void mfi_placement_drop_sim(void)
{
    int k = 0;
    for (int i = 0; i < nregistry; i++) {
        if (registry[i]->sim) mf_placement_destroy(registry[i]);
        else registry[k++] = registry[i];
    }
    nregistry = k;
}

void mfi_global_teardown(void)
{
    for (int i = 0; i < nregistry; i++) mf_placement_destroy(registry[i]);
    free(registry);
    registry = NULL;
    nregistry = 0;
}

int mf_placement_size(const mf_placement *p) { return p ? p->n : 0; }
int mf_placement_mesh_ndim(const mf_placement *p) { return p ? p->mesh_ndim : 0; }
int mf_placement_mesh_dim(const mf_placement *p, int d) { return p && d >= 0 && d < p->mesh_ndim ? p->mesh[d] : 0; }
int mf_placement_rank(const mf_placement *p, int i) { return p && i >= 0 && i < p->n ? p->ranks[i] : -1; }
int mf_placement_index(const mf_placement *p) { return p ? p->index : -1; }

bool mf_placement_equal(const mf_placement *a, const mf_placement *b)
{
    return a == b || (a && b && same_layout(a, b->n, b->ranks, b->mesh_ndim, b->mesh, b->dev));
}

char *mf_placement_str(const mf_placement *p, char *buf, size_t size)
{
    if (!buf || !size) return buf;
    buf[0] = 0;
    if (!p) return buf;
    size_t len = 0;
#define PUT(...) (len += len < size ? (size_t)snprintf(buf + len, size - len, __VA_ARGS__) : 0)
    for (int i = 0; i < p->n;) {
        int j = i;
        while (j + 1 < p->n && p->ranks[j + 1] == p->ranks[j] + 1) j++;
        PUT("%s%d", i ? "," : "", p->ranks[i]);
        if (j > i) PUT("-%d", p->ranks[j]);
        i = j + 1;
    }
    if (p->mesh_ndim > 1) {
        PUT(" mesh ");
        for (int d = 0; d < p->mesh_ndim; d++) PUT("%s%d", d ? "x" : "", p->mesh[d]);
    }
    if (p->dev == MF_DEV_CUDA) PUT(" cuda");
    if (p->dev == MF_DEV_META) PUT(" meta");
#undef PUT
    return buf;
}
