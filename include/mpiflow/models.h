/*
 * mpiflow/models.h - the reference models: OneFlow's MLP and LeNet, and
 * GPT-2.
 */
#ifndef MPIFLOW_MODELS_H
#define MPIFLOW_MODELS_H

#include "mpiflow/nn.h"
#include "mpiflow/pipeline.h"
#include "mpiflow/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OneFlow's mixed_parallel_mlp: flatten, hidden = Linear(in, hidden),
 * ReLU, output = Linear(hidden, classes). Parameters: hidden.weight,
 * hidden.bias, output.weight, output.bias. */
MF_API mf_module *mf_model_mlp(int64_t in_features, int64_t hidden, int64_t classes);

/* OneFlow's mixed_parallel_lenet for [N, channels, h, w] input (h and w
 * divisible by 4): conv1 = Conv2d(channels, 32, 5, padding 2), ReLU,
 * MaxPool 2; conv2 = Conv2d(32, 64, 5, padding 2), ReLU, MaxPool 2;
 * flatten; hidden = Linear(64*h/4*w/4, 512), ReLU, Dropout(0.5);
 * output = Linear(512, classes). */
MF_API mf_module *mf_model_lenet(int64_t channels, int64_t h, int64_t w, int64_t classes);

/* A small vision transformer for square [N, channels, image, image]
 * input (doc/models.md): patch = Conv2d(channels, dim, patch, stride
 * patch) plus a position embedding (patch.pos); depth pre-LayerNorm
 * blocks block0.. of ln_1, attn (q, k, v = Linear(dim, dim), heads, proj),
 * ln_2 and mlp (fc, GELU, proj); head = LayerNorm, the mean over the
 * patches and fc = Linear(dim, classes). A Sequential of patch, the
 * blocks and head, built with the public API only. */
typedef struct mf_vit_config {
    int image, channels, patch;   /* the patch divides the image side */
    int dim, heads, depth, mlp_dim, classes;
} mf_vit_config;
MF_API mf_module *mf_model_vit(const mf_vit_config *c);
/* Appends the ViT's Megatron-style split along mesh dimension tp (NULL:
 * "tp") to a plan: attn.q/k/v and mlp.fc S(0) (column parallel: whole
 * heads), attn.proj and mlp.proj weights S(1) (row parallel); the
 * attention's and the MLP's input B, their outputs and the patch
 * embedding's in the residual stream's layout (B, or S(1) over the
 * patches with sequence_parallel), the head's input B. */
MF_API mf_status mf_vit_add_megatron_rules(mf_plan *plan, const char *tp, bool sequence_parallel);
/* The attention heads of a model from mf_model_vit; -1 for another. */
MF_API int mf_vit_heads(const mf_module *vit);

/* GPT-2 (doc/gpt.md), with nanoGPT's parameter names: token and position
 * embeddings, n_layer pre-LayerNorm blocks of causal self-attention and
 * a 4x MLP with tanh GELU, a final LayerNorm, a head tied to the token
 * embedding. mf_module_forward takes tokens [B, T] (i64, T <= seq_len)
 * and gives logits [B, T, vocab_size]. */
typedef struct mf_gpt_config {
    int n_layer, n_head, n_embd;
    int seq_len;       /* the longest context (position embeddings) */
    int vocab_size;
    double dropout;    /* after the embeddings, attention and MLP; 0 */
} mf_gpt_config;
/* "char" (4 layers, 128 wide, T 128, bytes: the quick start), "10m"
 * (6 x 384, T 256, bytes), "gpt2", "gpt2-medium", "gpt2-large",
 * "gpt2-xl" (vocabulary 50257, T 1024). */
MF_API mf_status mf_gpt_preset(const char *name, mf_gpt_config *c);
MF_API mf_module *mf_model_gpt(const mf_gpt_config *c);
/* The configuration of a GPT module, or NULL for another module. */
MF_API const mf_gpt_config *mf_gpt_config_of(const mf_module *m);
/* The last LayerNorm's output [B, T, n_embd]. */
MF_API mf_tensor *mf_gpt_hidden(mf_module *gpt, mf_tensor *tokens);
/* Mean next-token cross-entropy of targets [B, T], with the fused head
 * (mf_linear_cross_entropy): the full logits never exist. */
MF_API mf_tensor *mf_gpt_loss(mf_module *gpt, mf_tensor *tokens, mf_tensor *targets);

/* Tensor parallelism (Megatron-LM's layout) and sequence parallelism as
 * SBP (doc/parallelism.md, "Transformers"). Makes every parameter global
 * on p: split along mesh dimension tp_dim as Megatron-LM splits it
 * (column-parallel c_attn and mlp.c_fc, row-parallel c_proj, a
 * vocabulary-parallel embedding and tied head), B along the others. The
 * forward then keeps the residual stream B along tp_dim (or S(1), the
 * sequence, with sequence_parallel) and the planner inserts the
 * allreduces (or reduce-scatters and allgathers). tp_dim -1: all
 * parameters B (data parallel). The head count must divide by the
 * degree; the vocabulary need not. Checkpoints of every layout load in
 * every other. Collective; on a local GPT. */
typedef struct mf_gpt_parallel {
    int tp_dim;               /* the tensor-parallel mesh dimension, or -1 */
    bool sequence_parallel;   /* LayerNorms, dropout, residuals split over the sequence */
    /* ZeRO as SBP over the other (data-parallel) dimensions: 2 and 3 split
     * every parameter there (its largest axis not split by tp); each use
     * gathers it to B, so its gradient is reduce-scattered back into the
     * split and the optimizer state is split with it. 3 frees each
     * gathered copy after the forward and gathers it again for backward
     * (FSDP); 2 keeps it until backward. 0: parameters B there. */
    int zero;
} mf_gpt_parallel;
MF_API mf_status mf_gpt_parallelize(mf_module *gpt, const mf_placement *p, const mf_gpt_parallel *o);
/* Appends Megatron-LM's tensor-parallel split of a GPT's parameters
 * along mesh dimension tp (NULL: "tp") to a plan: wte S(0) (vocabulary
 * parallel), attn.c_attn S(1) and mlp.c_fc S(0) (column parallel),
 * attn.c_proj and mlp.c_proj weights S(1) (row parallel); and the
 * activations' layouts along tp: the attention's and the MLP's input B,
 * their outputs and the token embedding's in the residual stream's
 * layout (B, or S(1) over the sequence with sequence_parallel), the
 * final LayerNorm's output B. */
MF_API mf_status mf_gpt_add_megatron_rules(mf_plan *plan, const char *tp, bool sequence_parallel);

/* Pipeline parallelism (doc/parallelism.md, "Transformers"). A GPT runs
 * n_layer + 2 layers: 0 the token and position embeddings, 1 .. n_layer
 * the blocks, n_layer + 1 the final LayerNorm, after which the head and
 * the loss run on the last stage. mf_gpt_layers gives them as a
 * Sequential (owned by the GPT, holding references to its parameters as
 * they are placed now) for mf_pipeline_balance and
 * mf_pipeline_parse_cuts. mf_gpt_pipeline_create places the parameters
 * of stage s's layers on placements[s] (every stage a mesh of one shape;
 * tensor and sequence parallelism inside each, as mf_gpt_parallelize;
 * no ZeRO-2/3) and makes the pipeline. With the embeddings and the head
 * on different stages, the last stage holds a copy of the token
 * embedding for the head, tied to it (mf_pipeline_tie): the optimizer
 * and checkpoints see the GPT's parameters only. Train with
 *   mf_pipeline_train_step(pipe, x, y, mf_gpt_pipeline_loss, gpt, &loss)
 * with tokens x[m] on the first stage and targets y[m] on the last. */
typedef struct mf_gpt_pipeline_opts {
    int nstages;
    const int *first;                   /* nstages + 1 cuts over the layers; NULL: balanced */
    mf_placement *const *placements;    /* stage s's ranks */
    mf_gpt_parallel par;                /* inside every stage (zero 0, or 2/3 with one stage) */
    int micro_batches;
    mf_pipeline_schedule schedule;
    /* deterministic mode's shards (mf_pipeline_opts.shards; 0: off): the
     * same bits on any number of data-parallel ranks, at a fixed
     * tensor-parallel size; train with mf_gpt_pipeline_loss_sum. One
     * stage only: with the head on another stage than the embedding,
     * the tied weight's two gradients would meet outside the shards'
     * order (refused). */
    int shards;
} mf_gpt_pipeline_opts;
MF_API mf_module *mf_gpt_layers(mf_module *gpt);
MF_API mf_pipeline *mf_gpt_pipeline_create(mf_module *gpt, const mf_gpt_pipeline_opts *o);
/* The loss of such a pipeline (user: the GPT): the mean next-token
 * cross-entropy of the last stage's hidden states through the head. */
MF_API mf_tensor *mf_gpt_pipeline_loss(mf_tensor *hidden, mf_tensor *targets, void *gpt);
/* The same loss summed over the micro-batch's tokens, as deterministic
 * shards take it (the executor divides by the batch's tokens). */
MF_API mf_tensor *mf_gpt_pipeline_loss_sum(mf_tensor *hidden, mf_tensor *targets, void *gpt);

/* Activation recompute (doc/gpt.md, "Recompute"), with mf_recompute:
 * BLOCK keeps only each block's input and runs the block's forward
 * again in backward; ATTN does so for the attention half of each block
 * (ln_1 to the residual) and keeps the MLP's activations. Gradients are
 * bit for bit those of NONE. */
typedef enum mf_gpt_recompute { MF_RECOMPUTE_NONE = 0, MF_RECOMPUTE_BLOCK, MF_RECOMPUTE_ATTN } mf_gpt_recompute;
MF_API mf_status mf_gpt_set_recompute(mf_module *gpt, mf_gpt_recompute mode);

/* Text generation (mpiflow-generate). */
typedef struct mf_gpt_gen_opts {
    double temperature;   /* 0: always the most likely token */
    int top_k;            /* draw among the k most likely only; 0: all */
    uint64_t seed;        /* the draws: the same seed gives the same tokens */
    bool use_cache;       /* keep each layer's keys and values (a KV cache) */
} mf_gpt_gen_opts;
/* Appends max_new tokens to prompt (n_prompt >= 1 tokens): out gets the
 * prompt and then the new tokens (n_prompt + max_new entries). A context
 * longer than seq_len keeps its last seq_len tokens. Local parameters,
 * one process; runs in eval mode without grad. */
MF_API mf_status mf_gpt_generate(mf_module *gpt, const int64_t *prompt, int n_prompt, int max_new,
                                 const mf_gpt_gen_opts *o, int64_t *out);

/* "mlp", "lenet" or "vit" (patches of 7 pixels, or 4 when 7 does not
 * divide the side; width 64, 4 heads, 2 blocks, MLP 128) for input
 * [c, h, w]; NULL with an error otherwise. */
MF_API mf_module *mf_model_create(const char *name, int64_t c, int64_t h, int64_t w, int64_t classes);

#ifdef __cplusplus
}
#endif
#endif
