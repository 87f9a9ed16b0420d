"""The Python front end: reference and oracle on NumPy arrays, Problem, and
check(fn) with correct and planted-bug callables (run by ctest with
PYTHONPATH=<build>/python)."""

import numpy as np
import pytest

import attnkit

# ---------------------------------------------------------------------------
# A plain NumPy attention in float64: the callable the campaign should pass.


def numpy_attention(p, q, k, v, bias):
    out = np.zeros((p.batch, p.q_heads, q.shape[2], p.head_dim), np.float32)
    for b in range(p.batch):
        nq, nk = p.q_lens[b], p.kv_lens[b]
        if nq == 0:
            continue
        visible = p.visible(b)
        for h in range(p.q_heads):
            kh = h // p.group_size
            qh = q[b, h, :nq].astype(np.float64)
            s = qh @ k[b, kh, :nk].astype(np.float64).T * p.scale
            s = np.where(visible, s, -np.inf)
            if bias is not None:
                s = s + bias[b, h if bias.shape[1] > 1 else 0, :nq, :nk]
            m = np.max(s, axis=1, keepdims=True, initial=-np.inf)
            e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
            den = e.sum(axis=1, keepdims=True)
            o = e @ v[b, kh, :nk].astype(np.float64)
            out[b, h, :nq] = o / np.where(den > 0, den, 1.0)
    return out


def random_inputs(rng, b=2, hq=4, hkv=2, sq=5, skv=9, d=16):
    q = rng.standard_normal((b, hq, sq, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
    return q, k, v


def widen(a):
    """float32 -> float64 for the plain model below."""
    return a.astype(np.float64)


# ---------------------------------------------------------------------------
# reference / oracle on arrays


def test_oracle_and_reference_agree_with_a_plain_model():
    rng = np.random.default_rng(1)
    q, k, v = random_inputs(rng)
    q_lens, kv_lens = [5, 3], [9, 4]
    p = attnkit.Problem(batch=2, q_heads=4, kv_heads=2, head_dim=16,
                        q_lens=q_lens, kv_lens=kv_lens, mask="causal")
    want = numpy_attention(p, widen(q), widen(k), widen(v), None)
    got64 = attnkit.oracle.attention(q, k, v, q_lens=q_lens, kv_lens=kv_lens,
                                     mask="causal")
    got32 = attnkit.reference.attention(q, k, v, q_lens=q_lens,
                                        kv_lens=kv_lens, mask="causal")
    assert got64.dtype == np.float64 and got32.dtype == np.float32
    assert got64.shape == q.shape
    # The plain model rounds its output to float32.
    np.testing.assert_allclose(got64, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got32, got64, rtol=0, atol=1e-5)
    # Rows past q_lens[b] are zeros.
    assert not got32[1, :, 3:].any() and not got64[1, :, 3:].any()


def test_strided_views_are_read_as_given():
    rng = np.random.default_rng(2)
    q, k, v = random_inputs(rng)
    want = attnkit.oracle.attention(q, k, v)
    # K/V token-major ([b, s, h, d] memory), V transposed ([b, h, d, s]).
    k_bshd = np.ascontiguousarray(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    v_tv = np.ascontiguousarray(v.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert v_tv.strides[2] == 4  # unit stride along the sequence
    got = attnkit.oracle.attention(q, k_bshd, v_tv)
    np.testing.assert_array_equal(got, want)
    # A view whose head dim is not unit-stride is copied (exactly).
    q_odd = np.asfortranarray(q)
    np.testing.assert_array_equal(attnkit.oracle.attention(q_odd, k, v), want)


def test_bias_implies_the_bias_mask_and_may_be_shared_by_heads():
    rng = np.random.default_rng(3)
    q, k, v = random_inputs(rng)
    bias = rng.standard_normal((2, 1, 5, 9)).astype(np.float32)
    bias[0, 0, 1, :] = -np.inf  # a fully masked row is zeros
    got = attnkit.oracle.attention(q, k, v, bias=bias)
    p = attnkit.Problem(batch=2, q_heads=4, kv_heads=2, head_dim=16,
                        q_lens=[5, 5], kv_lens=[9, 9], mask="bias")
    want = numpy_attention(p, widen(q), widen(k), widen(v), widen(bias))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert not got[0, :, 1].any()


def test_bf16_arrays_are_uint16_bits():
    rng = np.random.default_rng(4)
    q, k, v = random_inputs(rng)

    def to_bf16_bits(a):  # round to nearest even
        u = a.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    def from_bits(b):
        return (b.astype(np.uint32) << 16).view(np.float32)

    qb, kb, vb = map(to_bf16_bits, (q, k, v))
    got = attnkit.oracle.attention(qb, kb, vb, dtype="bf16")
    want = attnkit.oracle.attention(from_bits(qb), from_bits(kb), from_bits(vb))
    np.testing.assert_array_equal(got, want)


def test_bad_inputs_name_the_field():
    rng = np.random.default_rng(5)
    q, k, v = random_inputs(rng)
    with pytest.raises(TypeError, match=r"q: dtype float64.*astype"):
        attnkit.reference.attention(q.astype(np.float64), k, v)
    with pytest.raises(ValueError, match=r"k: shape \(2, 2, 9\) has 3"):
        attnkit.reference.attention(q, k[:, :, :, 0], v)
    with pytest.raises(ValueError, match=r"k: shape\[2\]=9 is shorter than "
                       r"the longest length 10"):
        attnkit.reference.attention(q, k, v, kv_lens=[9, 10])
    with pytest.raises(ValueError, match=r"mask=diagonal is not"):
        attnkit.reference.attention(q, k, v, mask="diagonal")
    with pytest.raises(ValueError, match="kv_heads"):
        attnkit.Problem(q_heads=8, kv_heads=3)
    with pytest.raises(TypeError, match="dtype uint16"):
        attnkit.reference.attention(q.view(np.uint16)[..., ::2], k, v)


def test_problem_round_trips_and_shows_its_mask():
    p = attnkit.Problem(batch=2, q_heads=8, kv_heads=2, head_dim=64,
                        q_lens=[3, 1], kv_lens=[5, 300], mask="causal")
    assert attnkit.Problem.parse(str(p)).kv_lens == [5, 300]
    assert str(attnkit.Problem.parse(str(p))) == str(p)
    assert p.group_size == 4 and p.scale == pytest.approx(0.125)
    # Queries sit at the end of the context: query i sees keys <= 2 + i.
    assert p.visible(0).tolist() == [[True, True, True, False, False],
                                     [True, True, True, True, False],
                                     [True, True, True, True, True]]
    with pytest.raises(IndexError):
        p.visible(2)


# ---------------------------------------------------------------------------
# check(fn)


def test_a_correct_callable_passes_the_campaign():
    r = attnkit.check(numpy_attention, tier="smoke", cases=60)
    assert r.passed, str(r)
    assert r.exit_code == 0 and r.cases == 60 and not r.failures
    assert r.skipped == 0  # i8 K/V included: dequantized for fn
    assert "numpy_attention" in r.summary and "check: PASS" in r.summary


def test_the_reference_on_arrays_passes_the_default_tier():
    """attnkit's own reference through the array API, bf16 as bits: every
    layout, padded and token-major q, shared bias, decode loops and long
    contexts of the default tier reach it as strided views."""

    kv_dtypes = set()

    def reference(p, q, k, v, bias):
        kv_dtypes.add(p.kv_dtype)
        dtype = p.dtype
        if p.kv_dtype == "i8" and dtype == "bf16":
            # K/V arrive dequantized as float32; q's bf16 bits widen exactly
            # (the reference's math is f32 either way).
            q, dtype = (q.astype(np.uint32) << 16).view(np.float32), "f32"
        return attnkit.reference.attention(
            q, k, v, q_lens=p.q_lens, kv_lens=p.kv_lens, mask=p.mask,
            window=p.window, bias=bias, scale=p.scale, dtype=dtype)

    r = attnkit.check(reference, bf16="bits")
    assert r.passed, str(r)
    assert r.cases == 1500 and r.skipped == 0
    assert "i8" in kv_dtypes


def test_a_planted_bug_is_shrunk_and_replays():
    def ignores_scale(p, q, k, v, bias):
        return numpy_attention(_Unscaled(p), q, k, v, bias)

    r = attnkit.check(ignores_scale, tier="smoke", cases=40)
    assert not r.passed and r.exit_code == 1
    f = r.failures[0]
    assert f.outcome == "mismatch" and f.max_abs_error > f.allowed_max_abs
    assert f.reproducer == f"attnkit.check(ignores_scale, repro={f.case!r})"
    assert "Reproduce: attnkit.check(ignores_scale" in f.text
    replay = attnkit.check(ignores_scale, repro=f.case)
    assert replay.cases == 1 and replay.failures[0].outcome == "mismatch"
    assert replay.failures[0].case == f.case


class _Unscaled:
    """A problem seen by a kernel that forgot the scale."""

    def __init__(self, p):
        self._p = p

    def __getattr__(self, name):
        return 1.0 if name == "scale" else getattr(self._p, name)


def test_writing_an_input_is_a_failure_of_its_own():
    def scales_q_in_place(p, q, k, v, bias):
        out = numpy_attention(p, q, k, v, bias)
        q *= 2.0
        return out

    r = attnkit.check(scales_q_in_place, tier="smoke", cases=20)
    assert r.failures and r.failures[0].outcome == "input_write"


def test_an_exception_or_a_bad_result_is_an_error_with_its_text():
    def raises(p, q, k, v, bias):
        raise ZeroDivisionError("planted")

    r = attnkit.check(raises, tier="smoke", cases=5)
    assert r.exit_code == 1 and r.failures[0].outcome == "error"
    assert "ZeroDivisionError: planted" in r.failures[0].message

    def wrong_shape(p, q, k, v, bias):
        return np.zeros((p.batch, p.q_heads, p.max_q_len, p.head_dim + 1))

    r = attnkit.check(wrong_shape, tier="smoke", cases=5)
    assert "returned shape" in r.failures[0].message
    assert "[batch, q_heads, q_len, head_dim]" in r.failures[0].message

    r = attnkit.check(lambda *a: None, tier="smoke", cases=5)
    assert "returned None" in r.failures[0].message


def test_nothing_checked_is_not_a_pass():
    r = attnkit.check(numpy_attention, tier="smoke", cases=10,
                      supports=lambda p: "not my shapes")
    assert not r.passed and r.exit_code == 4 and r.skipped == 10
    assert "NOTHING CHECKED" in r.summary
    r = attnkit.check(numpy_attention, tier="smoke", cases=0)
    assert r.exit_code == 4


def test_supports_selects_and_a_raising_supports_is_a_finding():
    seen = []

    def only_f32(p):
        seen.append(p.dtype)
        return p.dtype == "f32" or "f32 only"

    r = attnkit.check(numpy_attention, tier="smoke", cases=40,
                      supports=only_f32)
    assert r.passed and r.skipped > 0 and "bf16" in seen

    def broken(p):
        raise RuntimeError("supports broke")

    r = attnkit.check(numpy_attention, tier="smoke", cases=3, supports=broken)
    assert r.failures and "supports broke" in r.failures[0].message


def test_bf16_modes():
    dtypes = set()

    def bits(p, q, k, v, bias):
        dtypes.add((p.dtype, q.dtype.name))
        # k and v of a quantized cache come dequantized (float32) in any
        # bf16 mode.
        q, k, v = ((x.astype(np.uint32) << 16).view(np.float32)
                   if x.dtype == np.uint16 else x for x in (q, k, v))
        return numpy_attention(p, q, k, v, bias)

    r = attnkit.check(bits, tier="smoke", cases=40, bf16="bits")
    assert r.passed, str(r)
    assert ("bf16", "uint16") in dtypes and ("f32", "float32") in dtypes
    dtypes.clear()
    r = attnkit.check(bits, tier="smoke", cases=40)  # bf16="float32"
    assert r.passed and ("bf16", "float32") in dtypes
    r = attnkit.check(bits, tier="smoke", cases=40, bf16="skip")
    assert r.passed and r.skipped > 0
    with pytest.raises(ValueError, match="bf16=f16 is not"):
        attnkit.check(bits, bf16="f16")


# An i8 case of the smoke tier's kind, and the same case stored as f32: the
# generator draws the same values for both, the i8 one quantized row by row.
I8_CASE = "seed=5,index=1,b=2,hq=4,hkv=2,d=5,q=3:1,kv=6:4,mask=causal,kv_dtype=i8"
I8_DECODE_CASE = ("seed=5,index=3,pad=2,steps=3,b=3,hq=6,hkv=3,d=8,q=1:0:2,"
                  "kv=5:3:9,mask=window:3,kv_dtype=i8,layout=bshd")


def quantize_rows(x):
    """attnkit's one rule in NumPy (float32 throughout): scale = absmax /
    127 (1 for a zero row), q = round half to even (np.rint) of x / scale,
    clipped to [-127, 127]; the dequantized value is q * scale."""
    absmax = np.abs(x).max(axis=-1, keepdims=True)
    scale = absmax / np.float32(127)
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(x / scale), -127, 127).astype(np.float32)
    return q * scale


def test_an_i8_case_reaches_fn_with_dequantized_values():
    seen = {}

    def capture(p, q, k, v, bias):
        seen[p.kv_dtype] = (p, k.copy(), v.copy())
        return numpy_attention(p, q, k, v, bias)

    f32_case = I8_CASE.replace(",kv_dtype=i8", "")
    assert attnkit.check(capture, repro=f32_case).passed
    r = attnkit.check(capture, repro=I8_CASE)
    assert r.passed and r.skipped == 0, str(r)
    p, k, v = seen["i8"]
    assert p.kv_dtype == "i8" and p.dtype == "f32" and p.quantized_kv
    assert str(p).endswith("kv_dtype=i8,layout=bhsd")
    assert k.dtype == np.float32 and v.dtype == np.float32
    _, k32, v32 = seen["f32"]
    for b, n in enumerate(p.kv_lens):
        np.testing.assert_array_equal(k[b, :, :n], quantize_rows(k32[b, :, :n]))
        np.testing.assert_array_equal(v[b, :, :n], quantize_rows(v32[b, :, :n]))
        # Quantized for real: not the f32 values themselves.
        assert not np.array_equal(k[b, :, :n], k32[b, :, :n])


def test_an_i8_decode_loop_reads_the_dequantized_cache_prefix():
    calls = []

    def capture(p, q, k, v, bias):
        calls.append((p.kv_dtype, k.dtype, list(p.kv_lens), k.shape[2]))
        for b, n in enumerate(p.kv_lens):
            rows = k[b, :, :n]
            np.testing.assert_array_equal(rows, quantize_rows(rows))
        return numpy_attention(p, q, k, v, bias)

    r = attnkit.check(capture, repro=I8_DECODE_CASE)
    assert r.passed and r.skipped == 0, str(r)
    # The prompt, then 3 steps, each on the cache's growing prefix.
    assert len(calls) == 4
    assert all(c[0] == "i8" and c[1] == np.float32 for c in calls)
    assert [c[2] for c in calls] == sorted(c[2] for c in calls)
    assert calls[0][2] != calls[-1][2]


def test_kv_i8_modes():
    r = attnkit.check(numpy_attention, repro=I8_CASE, kv_i8="skip")
    assert r.exit_code == 4 and r.skipped == 1 and "NOTHING CHECKED" in r.summary
    # The campaign runs everything else.
    r = attnkit.check(numpy_attention, tier="smoke", cases=60, kv_i8="skip")
    assert r.passed and r.skipped > 0, str(r)

    def ignores_k_scale(p, q, k, v, bias):
        if p.kv_dtype == "i8":  # a kernel that reads the int8 as the value
            k = k / np.abs(k).max(axis=-1, keepdims=True).clip(1e-30) * 127
        return numpy_attention(p, q, k, v, bias)

    r = attnkit.check(ignores_k_scale, tier="smoke", cases=60)
    assert not r.passed and r.failures[0].problem.kv_dtype == "i8"
    with pytest.raises(ValueError, match="kv_i8=int8 is not dequantize\\|skip"):
        attnkit.check(numpy_attention, kv_i8="int8")


def test_keyboard_interrupt_stops_the_campaign():
    def interrupted(p, q, k, v, bias):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        attnkit.check(interrupted, tier="smoke", cases=50)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="not a callable"):
        attnkit.check(3)
    with pytest.raises(ValueError, match="tier=huge"):
        attnkit.check(numpy_attention, tier="huge")
    with pytest.raises(ValueError, match="shard=\\(2, 2\\)"):
        attnkit.check(numpy_attention, shard=(2, 2))
    with pytest.raises(ValueError, match="seed"):
        attnkit.check(numpy_attention, repro="seed=x")
