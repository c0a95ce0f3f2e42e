"""tiny_gpt: a small decoder-only transformer over bytes, written for TorchScript.

Byte-level vocabulary (256 ids, a token is a byte), 4 pre-norm blocks of d_model 256 (4 heads of
64, an MLP of 1024 with GELU), rotary position embeddings (RoPE), a final LayerNorm and an
untied output layer. Context: CTX positions.

Scripted entry points (and context_length(), the positions it was built for):

    forward(x: int64 [B, T]) -> logits float32 [B, T, 256]
        the plain causal transformer over whole sequences, no cache: training and the tests'
        reference greedy loop use it.

    new_cache(slots: int, ctx: int) -> float32 [LAYERS, 2, slots, HEADS, ctx, HEAD_DIM]
        the keys (index 0) and values (1) of every layer for `slots` sequences of up to `ctx`
        positions, uninitialised: the server allocates it once and keeps it, a sequence owns one
        slot, and a slot's memory is only touched from its first use on, so a server that uses
        few slots holds few pages of it.

    clear_slot(cache, slot: int)
        zeros one slot: the server calls it before the slot's first use. Attention may read a slot
        beyond its own length, masked: what lies there must be finite, which zeros are and an
        earlier sequence's keys and values are.

    step(cache, tokens, slots, pos, groups, chunks) -> logits [n_dec + P, 256]
        one iteration of continuous batching over N rows, a row being one token of one slot at
        one position (tokens, slots, pos: int64 [N]). The first rows decode: one row per slot,
        distinct slots, each attending to its slot's positions 0..pos. They come in groups:
        groups is int64 [G, 4], for each group (slot_lo, slot_hi, t, rows): its next `rows` rows,
        in slot order, have slots in [slot_lo, slot_hi) and positions below t, and attend in one
        batched product over the cache slots slot_lo..slot_hi-1, positions 0..t-1, as they lie in
        memory (no copy of anyone's keys): a slot of the range without a row computes a row that
        is dropped, and a row is masked beyond its own position. The other rows are prefill
        chunks: chunks is int64 [P, 3], for each chunk (slot, first row, rows), rows that are
        consecutive positions of one slot. Every row's key and value are written into the cache
        in place before attention, so a chunk attends to what earlier steps left in its slot and
        to itself (causally). The result holds the logits of each decode row, then of the last
        row of each chunk.

What a group reads is (slot_hi - slot_lo) x t positions of keys and values per layer, the larger
part of a decode row's cost, and a group costs a few small products of its own: the server
(backend/handlers/textgen.c) cuts its decoding slots into the groups that cost least. A group
that has a row for every slot of its range needs no scatter of its queries, and one whose rows
are all at position t - 1 (a batch in lockstep) no mask.
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
    def context_length(self) -> int:
        return self.ctx

    @torch.jit.export
    def step(self, cache: Tensor, tokens: Tensor, slots: Tensor, pos: Tensor, groups: Tensor,
             chunks: Tensor) -> Tensor:
        n = tokens.size(0)
        h = self.tok(tokens)
        cos = self.cos.index_select(0, pos)[:, None, None]  # [N, 1, 1, HALF]: q and k, all heads
        sin = self.sin.index_select(0, pos)[:, None, None]
        # each decode group: its rows; unless it is dense (a row for every slot of its range, in
        # slot order), where they sit in the range; unless all its rows are at its last position,
        # its mask
        group_list: List[List[int]] = groups.tolist()
        g_row: List[int] = []
        g_idx: List[Tensor] = []
        g_mask: List[Tensor] = []
        g_dense: List[bool] = []
        g_masked: List[bool] = []
        n_dec = 0
        for g in group_list:
            lo, hi, t, nr = g[0], g[1], g[2], g[3]
            idx = slots[n_dec:n_dec + nr] - lo
            gpos = pos[n_dec:n_dec + nr]
            dense = hi - lo == nr and bool((idx == torch.arange(nr)).all())
            masked = not dense or not bool((gpos == t - 1).all())
            mask = torch.zeros(0)
            if masked:
                # each slot's last visible position: its row's, 0 for a slot of the range that
                # does not decode now (its row is dropped; one visible key keeps softmax finite)
                last = torch.zeros(hi - lo, dtype=torch.long)
                last.index_copy_(0, idx, gpos)
                mask = torch.zeros(hi - lo, 1, 1, t)
                mask.masked_fill_((torch.arange(t)[None, :] > last[:, None])[:, None, None],
                                  float("-inf"))
            g_row.append(n_dec)
            g_idx.append(idx)
            g_mask.append(mask)
            g_dense.append(dense)
            g_masked.append(masked)
            n_dec += nr
        n_chunks = chunks.size(0)
        chunk_list: List[List[int]] = chunks.tolist()
        for layer, blk in enumerate(self.blocks):
            qkv = blk.qkv(blk.ln1(h)).view(n, 3, self.heads, self.head_dim)
            qk = rotate(qkv[:, :2], cos, sin)
            q = qk[:, 0] * self.scale  # a power of two: the same as scaling the scores
            ck = cache[layer, 0]
            cv = cache[layer, 1]
            ck[slots, :, pos] = qk[:, 1]
            cv[slots, :, pos] = qkv[:, 2]
            o = torch.empty(n, self.heads, self.head_dim)
            for gi in range(len(group_list)):
                lo, hi, t, nr = group_list[gi][0], group_list[gi][1], group_list[gi][2], \
                    group_list[gi][3]
                r0 = g_row[gi]
                if g_dense[gi]:
                    qd = q[r0:r0 + nr].unsqueeze(2)
                else:
                    qd = torch.zeros(hi - lo, self.heads, 1, self.head_dim)
                    qd[g_idx[gi], :, 0] = q[r0:r0 + nr]
                att = torch.matmul(qd, ck[lo:hi, :, :t].transpose(-1, -2))
                if g_masked[gi]:
                    att = att + g_mask[gi]
                od = torch.matmul(att.softmax(-1), cv[lo:hi, :, :t])
                if g_dense[gi]:
                    o[r0:r0 + nr] = od[:, :, 0]
                else:
                    o[r0:r0 + nr] = od[g_idx[gi], :, 0]
            for c in range(n_chunks):
                slot, r0, nr = chunk_list[c][0], chunk_list[c][1], chunk_list[c][2]
                p0 = int(pos[r0])
                qc = q[r0:r0 + nr].transpose(0, 1)  # [H, nr, HD]
                att = torch.matmul(qc, ck[slot, :, :p0 + nr].transpose(-1, -2))
                causal = torch.ones(nr, p0 + nr, dtype=torch.bool).triu(p0 + 1)
                att = att.masked_fill(causal, float("-inf")).softmax(-1)
                o[r0:r0 + nr] = torch.matmul(att, cv[slot, :, :p0 + nr]).transpose(0, 1)
            h = h + blk.proj(o.reshape(n, self.d_model))
            h = h + blk.mlp(h)
        rows = torch.cat([torch.arange(n_dec), chunks[:, 1] + chunks[:, 2] - 1])
        return self.head(self.ln_f(h.index_select(0, rows)))
