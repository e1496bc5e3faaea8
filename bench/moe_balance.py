#!/usr/bin/python3
"""How evenly a Mixtral's router spreads tokens over its experts, with and without the
load-balancing loss: configs/mixtral-tiny.toml trained --steps steps (default 300) on the built-in
Markov data at router_aux_loss_coef = --coef (default the config's) and at 0, in one run on one
machine. Prints, per run, the step metrics' tokens per expert (max over mean, the worst layer)
at the first step, the last and the mean of the last 10, with the final eval loss; one JSON line per
run last.

usage: bench/moe_balance.py [--build build] [--steps 300] [--coef 0.02] [--set key=value ...]
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(tidal, steps, coef, sets):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cmd = [tidal, "train", "-c", os.path.join(ROOT, "configs", "mixtral-tiny.toml"), "--metrics", metrics,
               "--set", f"train.steps={steps}", "--set", f"model.router_aux_loss_coef={coef}",
               "--set", f"train.eval_every={steps}"]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(metrics)]
    steps_ = [r for r in rows if "moe" in r]
    ratio = [r["moe"]["tokens_per_expert_max_over_mean"] for r in steps_]
    summary = [r for r in rows if r.get("summary")][-1]
    return {"coef": coef, "steps": len(steps_), "first": ratio[0], "last": ratio[-1],
            "last10_mean": sum(ratio[-10:]) / len(ratio[-10:]), "aux_loss_last": steps_[-1]["moe"]["aux_loss"],
            "final_eval_loss": summary.get("final_loss")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--coef", type=float, default=0.02)
    ap.add_argument("--set", action="append", default=[], help="more tidal train --set keys")
    args = ap.parse_args()
    tidal = os.path.join(args.build, "src", "tidal")
    print(f"config: configs/mixtral-tiny.toml, {args.steps} steps on the Markov data" +
          (f", {' '.join(args.set)}" if args.set else ""))
    results = [run(tidal, args.steps, c, args.set) for c in (args.coef, 0.0)]
    for r in results:
        print(f"  router_aux_loss_coef {r['coef']:<6}: tokens per expert max/mean (worst layer) step 1 {r['first']:.3f}, "
              f"step {r['steps']} {r['last']:.3f}, last 10 steps' mean {r['last10_mean']:.3f}; load-balancing loss "
              f"{r['aux_loss_last']:.4f}; final eval loss {r['final_eval_loss']:.4f}")
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
