#!/bin/sh
# A trained GPT's checkpoint through mpiflow-ckpt export and import in
# Hugging Face's GPT-2 layout and back, bit for bit; the exported file's
# Conv1D weights are the checkpoint's transposed (read with h5py and
# NumPy); the imported checkpoint generates the same text; a damaged
# file is refused with exit 2. Without Debian's python3-h5py and
# python3-numpy the checks that read files with them do not run, and the
# test SKIPs after the rest passes.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T="$TMPDIR_TEST"
CKPT="$top_builddir/mpiflow-ckpt"
GEN="$top_builddir/mpiflow-generate"
# the independent checks read the files with h5py and NumPy: without
# their Debian packages the rest runs and the test then SKIPs, saying so
py=yes
python_deps python3-h5py python3-numpy -- h5py numpy || py=no
awk 'BEGIN { for (i = 0; i < 400; i++) print "line", i % 7, "of a small text to learn from" }' >"$T/t.txt"
run_train 1 --model gpt --dataset "text:$T/t.txt" --n-layer 2 --n-head 2 --n-embd 32 --seq-len 16 --batch-size 8 \
    --steps 5 --threads 1 --no-eval --checkpoint "$T/a.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "training exit $rc"

"$CKPT" export "$T/a.h5" "$T/a.safetensors" --layout hf-gpt2 || fail "export"
"$CKPT" import "$T/a.safetensors" "$T/b.h5" --layout hf-gpt2 --n-head 2 || fail "import"
"$CKPT" export "$T/b.h5" "$T/b.safetensors" --layout hf-gpt2 || fail "export of the import"
cmp "$T/a.safetensors" "$T/b.safetensors" || fail "hf-gpt2 round trip is not bit for bit"
"$CKPT" export "$T/a.h5" "$T/a.mf.safetensors" || fail "export, mpiflow layout"
"$CKPT" export "$T/b.h5" "$T/b.mf.safetensors" || fail "export of the import, mpiflow layout"
cmp "$T/a.mf.safetensors" "$T/b.mf.safetensors" || fail "the imported checkpoint's weights differ"
echo "ok: export, import, export: bit for bit"

if [ "$py" = yes ]; then
    /usr/bin/python3 - "$T/a.h5" "$T/a.safetensors" <<'EOF' || fail "the hf-gpt2 file does not hold the checkpoint's weights in HF's layout"
import json, struct, sys
import h5py, numpy as np
ck, st = sys.argv[1], sys.argv[2]
raw = open(st, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
def get(name):
    e = hdr[name]
    a, b = e["data_offsets"]
    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(e["shape"])
with h5py.File(ck, "r") as f:
    m = f["model"]
    w = m["transformer.h.0.attn.c_attn.weight"][...]   # [3, C, C]: nanoGPT's [3C, C], q, k, v leading
    assert w.ndim == 3 and w.shape[0] == 3
    assert np.array_equal(get("h.0.attn.c_attn.weight"), w.reshape(-1, w.shape[-1]).T)
    assert get("h.0.attn.c_attn.bias").shape == (3 * w.shape[-1],)
    assert get("h.1.mlp.c_fc.weight").shape == (32, 128)
    assert np.array_equal(get("wte.weight"), m["transformer.wte.weight"][...])
    assert np.array_equal(get("h.1.ln_2.bias"), m["transformer.h.1.ln_2.bias"][...])
    assert "lm_head.weight" not in hdr
print("ok: Conv1D weights transposed, the rest as saved")
EOF
fi

a=$("$GEN" --checkpoint "$T/a.h5" --prompt "line " --max-new-tokens 40 --seed 3) || fail "generate from the trained checkpoint"
b=$("$GEN" --checkpoint "$T/b.h5" --prompt "line " --max-new-tokens 40 --seed 3) || fail "generate from the imported one"
[ "$a" = "$b" ] || fail "the imported checkpoint generates other text"
echo "ok: the same text from both"

# a checkpoint with c_attn in its older 2-D layout ([3C, C], [3C]): refused
# with a message naming the conversion, which then gives the same model
if [ "$py" = yes ]; then
    cp "$T/a.h5" "$T/old.h5"
    /usr/bin/python3 - "$T/old.h5" <<'EOF' || fail "rewriting c_attn in the older layout"
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    for i in range(2):
        for part in ("weight", "bias"):
            k = "model/transformer.h.%d.attn.c_attn.%s" % (i, part)
            a, attrs = f[k][...], dict(f[k].attrs)
            del f[k]
            d = f.create_dataset(k, data=a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:]))
            for n, v in attrs.items():
                d.attrs[n] = v
EOF
    run_train 1 --model gpt --dataset "text:$T/t.txt" --n-layer 2 --n-head 2 --n-embd 32 --seq-len 16 --batch-size 8 \
        --steps 6 --threads 1 --no-eval --resume "$T/old.h5" >/dev/null
    [ "$rc" -eq 2 ] && grep -q "has shape \[96,32\] in the checkpoint but \[3,32,32\] in the model (the same values in an older layout: convert" "$T/out" ||
        { cat "$T/out"; fail "an older c_attn: exit $rc, or no hint"; }
    "$CKPT" export "$T/old.h5" "$T/old.safetensors" >/dev/null || fail "export of the older layout"
    "$CKPT" import "$T/old.safetensors" "$T/conv.h5" --n-head 2 >/dev/null || fail "import of the older layout"
    "$CKPT" export "$T/conv.h5" "$T/conv.mf.safetensors" >/dev/null || fail "export of the converted checkpoint"
    cmp "$T/conv.mf.safetensors" "$T/a.mf.safetensors" || fail "the converted checkpoint's weights differ"
    echo "ok: an older c_attn layout is refused with its conversion, which gives the same weights"
fi

head -c 40 "$T/a.safetensors" >"$T/bad.safetensors"
"$CKPT" import "$T/bad.safetensors" "$T/c.h5" --layout hf-gpt2 >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "not a safetensors file we read" "$T/out" || { cat "$T/out"; fail "a damaged file: exit $rc"; }
[ ! -e "$T/c.h5" ] || fail "a refused import left a checkpoint"
"$CKPT" import "$T/a.safetensors" "$T/c.h5" >"$T/out" 2>&1
[ $? -eq 2 ] && grep -q "is the layout hf-gpt2" "$T/out" || { cat "$T/out"; fail "wrong layout not explained"; }
echo "ok: damaged file and wrong layout refused"

# the picture of a run: a PNG from its metrics, and the refusals
run_train 1 --model gpt --dataset "text:$T/t.txt" --n-layer 1 --n-head 2 --n-embd 16 --seq-len 16 --batch-size 8 \
    --steps 20 --log-every 2 --val-every 10 --val-batches 2 --threads 1 --metrics "$T/run.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "training for the plot: exit $rc"
PLOT="$top_builddir/mpiflow-plot"
"$PLOT" "$T/run.csv" -o "$T/run.png" || fail "mpiflow-plot"
[ "$(head -c 8 "$T/run.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "run.png is not a PNG"
"$PLOT" "$T/run.csv" -o - | grep -q "validation loss" || fail "no validation curve in the text plot"
printf 'a,b\n1,2\n' >"$T/other.csv"
"$PLOT" "$T/other.csv" 2>"$T/err"; [ $? -eq 2 ] && grep -q "not an mpiflow-train --metrics file" "$T/err" || fail "a foreign CSV"
echo "ok: mpiflow-plot draws the run"
[ "$py" = yes ] || skip "the rest passed, but the checks of the HF layout and of the older c_attn layout did not run: $python_missing"
