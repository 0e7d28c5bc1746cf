"""The installed neuralops' bidirectional forward and backward against float64 (the fallback in
float64), on odd shapes that take the 256- and 512-feature blocks (GQA, Cosformer, padded D and Dv):
the bf16 bound 1e-2 on out, dq, dk and dv. A quick check of one build inside an A/B lease.

    python benchmarks/linear_attn_bidir_check.py      # with neuralops installed, on a GPU
"""
import torch
from neuralops.core.triton_kernels import linear_attn as la

worst = 0.0
for cos, b, h, hkv, n, d, dv in ((False, 2, 4, 2, 1000, 256, 256), (False, 1, 2, 2, 333, 200, 136),
                                 (True, 2, 2, 1, 777, 256, 256), (True, 1, 4, 2, 1000, 128, 128),
                                 (True, 2, 2, 2, 129, 160, 96)):
    g = torch.Generator(device="cuda").manual_seed(n)
    q = torch.randn(b, h, n, d, device="cuda", generator=g)
    k = torch.randn(b, hkv, n, d, device="cuda", generator=g)
    v = torch.randn(b, hkv, n, dv, device="cuda", generator=g)
    go = torch.randn(b, h, n, dv, device="cuda", generator=g)
    w = la.cosformer_weights(n, device="cuda") if cos else (None, None)
    xs = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
    out = la.fwd(*xs, False, cos_weight=w[0], sin_weight=w[1])
    out.backward(go.to(torch.bfloat16))
    rs = [t.to(torch.bfloat16).double().requires_grad_() for t in (q, k, v)]
    wd = [x.double() if x is not None else None for x in w]
    ref = la.linear_attn_pytorch_fallback(*rs, False, cos_weight=wd[0], sin_weight=wd[1])
    ref.backward(go.to(torch.bfloat16).double())
    errs = [((a.double() - r).norm() / r.norm()).item() for a, r in
            ((out, ref), *((x.grad, r.grad) for x, r in zip(xs, rs)))]
    worst = max(worst, *errs)
    print(f"bidirectional cos={cos} B{b} H{h} Hkv{hkv} N{n} D{d} Dv{dv}: out/dq/dk/dv rel err "
          + " ".join(f"{e:.1e}" for e in errs), flush=True)
print(f"CHECK {'PASS' if worst < 1e-2 else 'FAIL'} worst {worst:.1e}")
