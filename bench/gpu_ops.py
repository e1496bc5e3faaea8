"""tidal's CUDA ops beside PyTorch's on the same GPU, in one run: GEMM (bf16, fp32 via TF32; a
Linear layer's forward, input-gradient and weight-gradient GEMMs at GPT-2 124M's shapes),
causal attention forward + backward (PyTorch: scaled_dot_product_attention, flash backend),
layernorm forward, AdamW (PyTorch: fused). Prints each pair and the ratio tidal / PyTorch.

    python3 bench/gpu_ops.py path/to/bench_gpu_ops [--quick]
"""
import json
import subprocess
import sys

import torch
import torch.nn.functional as F


def time_cuda(f, reps=10):
    """Median seconds of `reps` runs after two warm-ups."""
    f()
    f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return sorted(times)[len(times) // 2]


def torch_seconds(name, shape):
    dev = "cuda"
    if name.startswith("gemm"):
        n = int(shape.split("x")[0])
        dtype = torch.bfloat16 if name == "gemm_bf16" else torch.float32
        torch.backends.cuda.matmul.allow_tf32 = name == "gemm_tf32"
        a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
        return time_cuda(lambda: a @ b)
    if name.startswith("linear"):
        # PyTorch's autograd: F.linear forward (bias in the epilogue), dy @ W, and dy^T @ x into a
        # fresh gradient (AccumulateGrad then takes it as the .grad).
        M, k_in, n_out = (int(x) for x in shape.split("x"))
        x = torch.randn(M, k_in, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n_out, k_in, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n_out, device=dev, dtype=torch.bfloat16)
        dy = torch.randn(M, n_out, device=dev, dtype=torch.bfloat16)
        if name.startswith("linear_forward"):
            return time_cuda(lambda: F.linear(x, w, b))
        if name.startswith("linear_dgrad"):
            return time_cuda(lambda: dy @ w)
        return time_cuda(lambda: dy.t() @ x)
    if name.startswith("attention"):
        d = int(name.split("_d")[1])
        B, H, T = (int(x[1:]) for x in shape.split())
        q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dy = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16)

        def step():
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y.backward(dy)
        return time_cuda(step, reps=5)
    if name.startswith("layernorm"):
        rows, C = (int(x) for x in shape.split("x"))
        x = torch.randn(rows, C, device=dev, dtype=torch.bfloat16)
        ln = torch.nn.LayerNorm(C, device=dev, dtype=torch.bfloat16)
        with torch.no_grad():
            return time_cuda(lambda: ln(x))
    if name.startswith("adamw"):
        n = int(shape.split()[0])
        p = torch.nn.Parameter(torch.randn(n, device=dev))
        p.grad = torch.randn(n, device=dev)  # PyTorch's fused AdamW wants grads of the param's dtype
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, fused=True)
        return time_cuda(opt.step)
    return None


def main():
    binary, rest = sys.argv[1], sys.argv[2:]
    out = subprocess.run([binary, *rest], check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    print(f"device: {rows[0]['device']}; PyTorch {torch.__version__}")
    print(f"{'op':<24} {'shape':<18} {'tidal':>10} {'PyTorch':>10} {'unit':<8} {'of peak':>8} {'tidal/PyTorch':>14}")
    for r in rows[1:]:
        ts = torch_seconds(r["name"], r["shape"])
        torch_rate = r["rate"] * r["seconds"] / ts if ts else float("nan")
        print(f"{r['name']:<24} {r['shape']:<18} {r['rate']:>10.1f} {torch_rate:>10.1f} {r['unit']:<8} "
              f"{r['of_peak']:>8.1%} {r['rate'] / torch_rate:>14.2f}")


if __name__ == "__main__":
    main()
