"""A real check of code nobody here wrote: PyTorch's softmax and matmul
(Debian's python3-torch), as a model would compute attention --
softmax(q @ k^T * scale + mask) @ v -- gated by the default tier, the CLI's
gate. Skipped, saying so, where torch is not installed."""

import os

import pytest

import attnkit

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: apt-get install python3-torch)")


def visible_mask(p, b):
    """The mask's structure as an additive tensor: -inf hides a key."""
    nq, nk = p.q_lens[b], p.kv_lens[b]
    visible = torch.from_numpy(p.visible(b))
    return torch.zeros(nq, nk).masked_fill(~visible, float("-inf"))


def torch_attention(p, q, k, v, bias, mask_of=visible_mask):
    """Eager PyTorch attention over a ragged batch: each sequence's valid
    rows, GQA by repeating kv heads, the mask as an additive -inf tensor."""
    out = torch.zeros(p.batch, p.q_heads, q.shape[2], p.head_dim)
    for b in range(p.batch):
        nq, nk = p.q_lens[b], p.kv_lens[b]
        if nq == 0:
            continue
        qb = torch.from_numpy(q[b, :, :nq])
        kb = torch.from_numpy(k[b, :, :nk]).repeat_interleave(p.group_size, 0)
        vb = torch.from_numpy(v[b, :, :nk]).repeat_interleave(p.group_size, 0)
        mask = mask_of(p, b)
        if bias is not None:
            mask = mask + torch.from_numpy(bias[b, :, :nq, :nk])
        logits = qb @ kb.transpose(-1, -2) * p.scale + mask
        probs = torch.softmax(logits, dim=-1)
        # softmax of a row with no visible key is NaN; the contract says 0.
        seen = torch.isfinite(logits).any(dim=-1, keepdim=True)
        out[b, :, :nq] = torch.where(seen, probs, 0.0) @ vb
    return out


def test_torch_attention_passes_the_default_tier():
    tier = os.environ.get("ATTNKIT_TORCH_TIER", "default")
    r = attnkit.check(torch_attention, tier=tier)
    print(r.summary)
    assert r.passed, str(r)
    assert r.cases == 1500 or tier != "default"
    # Quantized-KV cases included: torch gets their K/V dequantized.
    assert r.skipped == 0, r.summary


def test_a_torch_bug_is_caught():
    """The same code with a classic slip: the causal mask aligned to the
    start of the context instead of its end (fine only when q == kv)."""

    def start_aligned_mask(p, b):
        if p.mask != "causal":
            return visible_mask(p, b)
        nq, nk = p.q_lens[b], p.kv_lens[b]
        return torch.full((nq, nk), float("-inf")).triu(1)

    def start_aligned(p, q, k, v, bias):
        return torch_attention(p, q, k, v, bias, mask_of=start_aligned_mask)

    r = attnkit.check(start_aligned, tier="smoke", cases=100)
    assert not r.passed
    f = r.failures[0]
    assert f.problem.mask == "causal" and f.outcome == "mismatch"
    assert f.reproducer.startswith("attnkit.check(start_aligned, repro=")
