"""tiny_gpt: a small decoder-only transformer over bytes, written for TorchScript.

Byte-level vocabulary (256 ids, a token is a byte), 4 pre-norm blocks of d_model 256 (4 heads of
64, an MLP of 1024 with GELU), rotary position embeddings (RoPE), a final LayerNorm and an
untied output layer. Context: CTX positions.

Three scripted entry points:

    forward(x: int64 [B, T]) -> logits float32 [B, T, 256]
        the plain causal transformer over whole sequences, no cache: training and the tests'
        reference greedy loop use it.

    new_cache(slots: int, ctx: int) -> float32 [LAYERS, 2, slots, HEADS, ctx, HEAD_DIM]
        the keys (index 0) and values (1) of every layer for `slots` sequences of up to `ctx`
        positions, uninitialised: the server allocates it once and keeps it, a sequence owns one
        slot, and a slot's memory is only touched from its first use on, so a server that uses
        few slots holds few pages of it.

    clear_slot(cache, slot: int)
        zeros one slot: the server calls it before the slot's first use. Attention reads a slot
        up to the longest sequence of the step, masked beyond its own length: what lies there
        must be finite, which zeros are and an earlier sequence's keys and values are.

    copy_slot(cache, src: int, dst: int, n: int)
        copies positions 0..n-1 of one slot into another (a cleared one): the server moves a
        sequence down into a slot that was freed below it, so that the busy slots stay at the
        bottom (see below).

    step(cache, tokens, slots, pos, n_dec: int, t_dec: int, chunks) -> logits [n_dec + P, 256]
        one iteration of continuous batching over N rows, a row being one token of one slot at
        one position (tokens, slots, pos: int64 [N]). Rows 0..n_dec-1 decode: one row per slot,
        distinct slots, each attending to its slot's positions 0..pos; t_dec is the largest of
        their pos + 1. The other rows are prefill chunks: chunks is int64 [P, 3], for each chunk
        (slot, first row, rows), rows that are consecutive positions of one slot. Every row's key
        and value are written into the cache in place before attention, so a chunk attends to
        what earlier steps left in its slot and to itself (causally). The result holds the
        logits of each decode row, then of the last row of each chunk.

The decode rows attend in one batched product over the cache slots 0..max(slot) as they lie in
memory (no copy of anyone's keys): a slot that does not decode in this step computes a row that
is dropped. A server that gives out the lowest free slot, and moves a sequence from the highest
busy slot into a slot freed below it (copy_slot), keeps that range short: early sequences finish
first, and without the move their late neighbours would keep the range at its widest.
"""
import math
from typing import List, Tuple

import torch
from torch import Tensor, nn

VOCAB = 256
D_MODEL = 256
LAYERS = 4
HEADS = 4
HEAD_DIM = D_MODEL // HEADS
FF = 1024
CTX = 512
ROPE_BASE = 10000.0


def rope_tables(ctx: int) -> Tuple[Tensor, Tensor]:
    inv = 1.0 / (ROPE_BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on the last dimension (pairs of halves); cos/sin broadcast against x[..., :HALF]."""
    half = x.size(-1) // 2
    a = x[..., :half]
    b = x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.fc1 = nn.Linear(D_MODEL, FF)
        self.fc2 = nn.Linear(FF, D_MODEL)

    def mlp(self, x: Tensor) -> Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)
        cos, sin = rope_tables(CTX)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.scale = 1.0 / math.sqrt(HEAD_DIM)
        self.ctx = CTX
        self.layers = LAYERS
        self.heads = HEADS
        self.head_dim = HEAD_DIM
        self.d_model = D_MODEL

    def forward(self, x: Tensor) -> Tensor:
        b, t = x.size(0), x.size(1)
        h = self.tok(x)
        cos = self.cos[:t][None, None]
        sin = self.sin[:t][None, None]
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        for blk in self.blocks:
            qkv = blk.qkv(blk.ln1(h)).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q = rotate(qkv[0], cos, sin)
            k = rotate(qkv[1], cos, sin)
            att = torch.matmul(q, k.transpose(-1, -2)) * self.scale
            att = att.masked_fill(causal, float("-inf")).softmax(-1)
            o = torch.matmul(att, qkv[2]).transpose(1, 2).reshape(b, t, self.d_model)
            h = h + blk.proj(o)
            h = h + blk.mlp(h)
        return self.head(self.ln_f(h))

    @torch.jit.export
    def new_cache(self, slots: int, ctx: int) -> Tensor:
        if slots < 1 or ctx < 1 or ctx > self.ctx:
            raise RuntimeError("new_cache: slots must be >= 1 and ctx in [1, " + str(self.ctx) + "]")
        return torch.empty(self.layers, 2, slots, self.heads, ctx, self.head_dim)

    @torch.jit.export
    def clear_slot(self, cache: Tensor, slot: int):
        cache[:, :, slot].zero_()

    @torch.jit.export
    def copy_slot(self, cache: Tensor, src: int, dst: int, n: int):
        cache[:, :, dst, :, :n] = cache[:, :, src, :, :n]

    @torch.jit.export
    def context_length(self) -> int:
        return self.ctx

    @torch.jit.export
    def step(self, cache: Tensor, tokens: Tensor, slots: Tensor, pos: Tensor, n_dec: int,
             t_dec: int, chunks: Tensor) -> Tensor:
        n = tokens.size(0)
        h = self.tok(tokens)
        cos = self.cos.index_select(0, pos)[:, None]  # [N, 1, HALF]: broadcast over heads
        sin = self.sin.index_select(0, pos)[:, None]
        dslots = slots[:n_dec]
        s_used = 0
        mask = torch.zeros(0)
        if n_dec > 0:
            s_used = int(dslots.max()) + 1
            # each used slot's last visible position: its decode row's, 0 for one that is not
            # decoding now (its row is dropped; one visible key keeps its softmax finite)
            last = torch.zeros(s_used, dtype=torch.long)
            last.index_copy_(0, dslots, pos[:n_dec])
            mask = torch.zeros(s_used, 1, 1, t_dec)
            mask.masked_fill_((torch.arange(t_dec)[None, :] > last[:, None])[:, None, None],
                              float("-inf"))
        n_chunks = chunks.size(0)
        chunk_list: List[List[int]] = chunks.tolist()
        for layer, blk in enumerate(self.blocks):
            qkv = blk.qkv(blk.ln1(h)).view(n, 3, self.heads, self.head_dim)
            q = rotate(qkv[:, 0], cos, sin)
            k = rotate(qkv[:, 1], cos, sin)
            ck = cache[layer, 0]
            cv = cache[layer, 1]
            ck[slots, :, pos] = k
            cv[slots, :, pos] = qkv[:, 2]
            o = torch.empty(n, self.heads, self.head_dim)
            if n_dec > 0:
                qd = torch.zeros(s_used, self.heads, 1, self.head_dim)
                qd[dslots, :, 0] = q[:n_dec]
                att = torch.matmul(qd, ck[:s_used, :, :t_dec].transpose(-1, -2)) * self.scale
                att = (att + mask).softmax(-1)
                od = torch.matmul(att, cv[:s_used, :, :t_dec])
                o[:n_dec] = od[dslots, :, 0]
            for c in range(n_chunks):
                slot, r0, nr = chunk_list[c][0], chunk_list[c][1], chunk_list[c][2]
                p0 = int(pos[r0])
                qc = q[r0:r0 + nr].transpose(0, 1)  # [H, nr, HD]
                att = torch.matmul(qc, ck[slot, :, :p0 + nr].transpose(-1, -2)) * self.scale
                causal = torch.ones(nr, p0 + nr, dtype=torch.bool).triu(p0 + 1)
                att = att.masked_fill(causal, float("-inf")).softmax(-1)
                o[r0:r0 + nr] = torch.matmul(att, cv[slot, :, :p0 + nr]).transpose(0, 1)
            h = h + blk.proj(o.reshape(n, self.d_model))
            h = h + blk.mlp(h)
        rows = torch.cat([torch.arange(n_dec), chunks[:, 1] + chunks[:, 2] - 1])
        return self.head(self.ln_f(h.index_select(0, rows)))
