#!/usr/bin/env python3
"""The Llama LoRA trainer's peer: the same model with transformers + PEFT, on the same weights,
LoRA factors and tokens, timed per step and compared with the library's trainer
(examples/llama_lora.c).

    # the inputs both sides read: frozen weights, LoRA factors (B non-zero, so that every
    # gradient is non-trivial at step 0) and tokens
    torch_llama.py make --config 8b2 --dir run/
    # the library's trainer on them
    llama_lora $(torch_llama.py args --config 8b2 --dir run/) --save-grads run/ours-grads.safetensors \\
        --json run/ours.json
    # PEFT on them: its step 0 gradients and 10-step loss curve against the trainer's, its
    # step time in fp32 (TF32 off), with TF32 and under bf16 autocast
    torch_llama.py compare --config 8b2 --dir run/ --json run/torch.json
    # a PEFT adapter the trainer saved (llama_lora ... --save-peft run/adapter): its loss on
    # the tokens, the base model's weights under peft.PeftModel.from_pretrained
    torch_llama.py adapter --config 8b2 --dir run/ --adapter run/adapter
    # with make --checkpoint, the weights also as transformers saves them (run/checkpoint:
    # config.json, shards and their index), for llama_lora --config ... --weights run/checkpoint

The model is LlamaForCausalLM(LlamaConfig(...)) with attention_bias False, tie_word_embeddings
False, and the config's head_dim and "llama3" rope_scaling where it names them (else
transformers' hidden / heads and none); for small-mistral MistralForCausalLM(MistralConfig(...))
with its sliding_window, and for small-qwen2 Qwen2ForCausalLM(Qwen2Config(...)) with biases on
q, k and v that make draws, whose config.json (make writes it) the trainer then reads. LoRA is
peft.LoraConfig(r, lora_alpha, target_modules = the seven projections, lora_dropout 0, bias
"none"); the optimizer torch.optim.AdamW(foreach=True) over
the LoRA factors. The loss is transformers' causal-LM loss with labels = input_ids. A step is
forward, backward, optimizer.step() and zero_grad(set_to_none=True), timed on the host around
a torch.cuda.synchronize() at its end (the trainer times its steps likewise: its loss read
waits for the whole step). Step 0's gradients and loss come from a separate forward and
backward before the timed steps, as the trainer's --save-grads does.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

CONFIGS = {
    # the step: a Llama-3-8B layer shape, 2 layers, one sequence of 2048 tokens
    "8b2": dict(layers=2, hidden=4096, heads=32, kv_heads=8, mlp=14336, vocab=128256,
                tokens=2048, theta=500000.0, eps=1e-5, rank=16, alpha=32.0),
    # a small model, for a quick check of agreement
    "small": dict(layers=2, hidden=256, heads=8, kv_heads=2, mlp=688, vocab=4096, tokens=256,
                  theta=10000.0, eps=1e-5, rank=8, alpha=16.0),
    # the small model with Llama 3.2's RoPE (its base and "llama3" scaling, the original
    # context cut to 256 positions so that the step's positions meet all three bands) and
    # heads of 64 from a hidden of 256 (q and o 512 wide), as transformers' head_dim allows
    "small-llama3": dict(layers=2, hidden=256, heads=8, kv_heads=2, head_dim=64, mlp=688,
                         vocab=4096, tokens=256, theta=500000.0, eps=1e-5, rank=8, alpha=16.0,
                         rope_llama3=(32.0, 1.0, 4.0, 256)),
    # the small model as transformers' Mistral (Mistral 7B v0.2's RoPE base), its sliding
    # window of 100 tokens shorter than the step's sequence: the trainer reads its config.json
    "small-mistral": dict(layers=2, hidden=256, heads=8, kv_heads=2, mlp=688, vocab=4096,
                          tokens=256, theta=1000000.0, eps=1e-5, rank=8, alpha=16.0,
                          mistral_window=100),
    # the small model as transformers' Qwen2: biases on q, k and v (drawn by make, as
    # transformers initialises them to 0), no sliding window; the trainer reads its config.json
    "small-qwen2": dict(layers=2, hidden=256, heads=8, kv_heads=2, mlp=688, vocab=4096,
                        tokens=256, theta=1000000.0, eps=1e-6, rank=8, alpha=16.0, qwen2=True),
}
PROJECTIONS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
LR, STEPS = 1e-4, 10


def trainer_args(c, d):
    """The llama_lora options of config c on the inputs in directory d."""
    own_config = "mistral_window" in c or "qwen2" in c
    return (["--config", os.path.join(d, "config.json")] if own_config else []) + [
            "--layers", c["layers"], "--hidden", c["hidden"], "--heads", c["heads"],
            "--kv-heads", c["kv_heads"], "--mlp", c["mlp"], "--vocab", c["vocab"],
            "--tokens", c["tokens"], "--theta", c["theta"], "--eps", c["eps"],
            "--rank", c["rank"], "--alpha", c["alpha"], "--lr", LR, "--steps", STEPS,
            "--weights", os.path.join(d, "weights.safetensors"),
            "--lora", os.path.join(d, "lora.safetensors"),
            "--data", os.path.join(d, "tokens.bin")] + (
                ["--head-dim", c["head_dim"]] if "head_dim" in c else []) + (
                ["--rope-llama3", ",".join(str(v) for v in c["rope_llama3"])]
                if "rope_llama3" in c else [])


def build(c, torch, dtype):
    import transformers
    named = {}
    if "head_dim" in c:
        named["head_dim"] = c["head_dim"]
    if "rope_llama3" in c:
        factor, low, high, original = c["rope_llama3"]
        named["rope_scaling"] = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                                 "high_freq_factor": high,
                                 "original_max_position_embeddings": original}
    shape = dict(
        vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["mlp"],
        num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"], rms_norm_eps=c["eps"], rope_theta=c["theta"],
        max_position_embeddings=max(4096, c["tokens"]), tie_word_embeddings=False)
    if "mistral_window" in c:
        cfg = transformers.MistralConfig(sliding_window=c["mistral_window"], **shape, **named)
        kind = transformers.MistralForCausalLM
    elif "qwen2" in c:
        cfg = transformers.Qwen2Config(use_sliding_window=False, **shape, **named)
        kind = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.LlamaConfig(attention_bias=False, mlp_bias=False, **shape, **named)
        kind = transformers.LlamaForCausalLM
    with torch.device("cuda"):
        return kind(cfg).to(dtype)


def lora_name(layer, proj, factor):
    return f"model.layers.{layer}.{proj}.lora_{factor}.weight"


def make(args, c, torch):
    from safetensors.torch import save_file
    torch.manual_seed(args.seed)
    model = build(c, torch, torch.float32)
    with torch.no_grad():  # biases of their own, where the model has them (Qwen2's q, k, v)
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.02)
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()
               if "rotary" not in k}
    save_file(weights, os.path.join(args.dir, "weights.safetensors"))
    model.config.to_json_file(os.path.join(args.dir, "config.json"))
    lora = {}
    for layer in range(c["layers"]):
        for proj, module in named_projections(model, layer):
            fan_in = module.weight.shape[1]
            bound = 1.0 / math.sqrt(fan_in)
            a = (torch.rand(c["rank"], fan_in, device="cuda") * 2 - 1) * bound
            b = torch.randn(module.weight.shape[0], c["rank"], device="cuda") * 0.02
            lora[lora_name(layer, proj, "A")] = a.cpu()
            lora[lora_name(layer, proj, "B")] = b.cpu()
    save_file(lora, os.path.join(args.dir, "lora.safetensors"))
    ids = torch.randint(0, c["vocab"], (c["tokens"],), dtype=torch.int32)
    ids.numpy().astype("<i4").tofile(os.path.join(args.dir, "tokens.bin"))
    if args.checkpoint:
        # the same weights as transformers saves a model: config.json and shards of 2 MB with
        # their model.safetensors.index.json (llama_lora --config DIR/config.json --weights DIR)
        model.save_pretrained(os.path.join(args.dir, "checkpoint"), max_shard_size="2MB")


def named_projections(model, layer):
    block = model.model.layers[layer]
    for proj in PROJECTIONS:
        part, name = proj.split(".")
        yield proj, getattr(getattr(block, part), name)


def peft_model(c, d, torch):
    import peft
    from safetensors.torch import load_file
    model = build(c, torch, torch.float32)
    model.load_state_dict(load_file(os.path.join(d, "weights.safetensors"), device="cuda"),
                          strict=False)
    cfg = peft.LoraConfig(r=c["rank"], lora_alpha=c["alpha"], lora_dropout=0.0, bias="none",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                          "up_proj", "down_proj"])
    model = peft.get_peft_model(model, cfg)
    factors = load_file(os.path.join(d, "lora.safetensors"), device="cuda")
    by_name = {}
    with torch.no_grad():
        for layer in range(c["layers"]):
            base = model.base_model.model
            for proj, module in named_projections(base, layer):
                for factor, lin in (("A", module.lora_A["default"]), ("B", module.lora_B["default"])):
                    lin.weight.copy_(factors[lora_name(layer, proj, factor)])
                    by_name[lora_name(layer, proj, factor)] = lin.weight
    return model, by_name


def tokens_of(c, d, torch):
    import numpy
    ids = numpy.fromfile(os.path.join(d, "tokens.bin"), dtype="<i4")[: c["tokens"]]
    return torch.from_numpy(ids.astype("int64")).cuda().unsqueeze(0)


def step_loss(model, ids, autocast, torch):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        return model(input_ids=ids, labels=ids).loss


def compare_gradients(model, by_name, ids, ours_path, torch):
    """Step 0's loss and, against the trainer's, each LoRA gradient's relative error (the 2-norm
    of the difference over that of PEFT's gradient)."""
    from safetensors.torch import load_file
    loss = step_loss(model, ids, False, torch)
    loss.backward()
    worst, errors = 0.0, {}
    if ours_path and os.path.exists(ours_path):
        ours = load_file(ours_path, device="cuda")
        for name, w in by_name.items():
            g = w.grad.float()
            e = ((ours[name].float() - g).norm() / g.norm().clamp_min(1e-30)).item()
            errors[name] = e
            worst = max(worst, e)
    model.zero_grad(set_to_none=True)
    return loss.item(), worst, errors


def timed_steps(model, by_name, ids, mode, torch):
    """STEPS AdamW steps in mode (fp32, tf32 or bf16): the losses, the step times, the peak
    memory."""
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    opt = torch.optim.AdamW(list(by_name.values()), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0, foreach=True)
    losses, seconds = [], []
    torch.cuda.reset_peak_memory_stats()
    for _ in range(STEPS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = step_loss(model, ids, mode == "bf16", torch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # waits for the step, as the trainer's loss read does
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return losses, seconds, torch.cuda.max_memory_allocated()


def compare(args, c, torch):
    ids = tokens_of(c, args.dir, torch)
    ours = {}
    if os.path.exists(os.path.join(args.dir, "ours.json")):
        with open(os.path.join(args.dir, "ours.json")) as f:
            ours = json.load(f)
    report = {"schema": "hd-llama-peer/1", "config": args.config, "tokens": c["tokens"],
              "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "modes": {}}
    for mode in args.modes.split(","):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model, by_name = peft_model(c, args.dir, torch)
        loss0, worst, errors = compare_gradients(
            model, by_name, ids, os.path.join(args.dir, "ours-grads.safetensors")
            if mode == "fp32" else None, torch)
        losses, seconds, peak = timed_steps(model, by_name, ids, mode, torch)
        median = statistics.median(seconds[1:] if len(seconds) > 1 else seconds)
        entry = {"loss0": loss0, "losses": losses, "step_seconds": seconds,
                 "median_step_s": median, "tokens_per_s": c["tokens"] / median,
                 "peak_bytes": peak}
        if mode == "fp32" and errors:
            entry["grad_rel_error_max"] = worst
            entry["grad_rel_errors"] = errors
        report["modes"][mode] = entry
        print(f"{mode}: step {median * 1e3:.1f} ms, {c['tokens'] / median:.0f} tokens/s, "
              f"peak {peak / 2**30:.2f} GiB, loss0 {loss0:.6f}"
              + (f", worst LoRA gradient error {worst:.2e}" if mode == "fp32" and errors else ""))
        del model, by_name
        torch.cuda.empty_cache()
    if ours:
        t = report["modes"].get("fp32")
        if t:
            rel = [abs(a - b) / abs(b) for a, b in zip(ours["losses"], t["losses"])]
            report["loss_rel_error_max"] = max(rel)
            first = abs(ours["losses"][0] - t["losses"][0]) / abs(t["losses"][0])
            print(f"losses over {len(rel)} steps agree to {max(rel):.2e} relative "
                  f"(step 1: {first:.2e})")
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)


def adapter(args, c, torch):
    """The loss on the tokens of the base weights in args.dir with the adapter directory
    args.adapter, as PEFT loads it (fp32, TF32 off)."""
    import peft
    from safetensors.torch import load_file
    torch.backends.cuda.matmul.allow_tf32 = False
    model = build(c, torch, torch.float32)
    model.load_state_dict(load_file(os.path.join(args.dir, "weights.safetensors"), device="cuda"),
                          strict=False)
    model = peft.PeftModel.from_pretrained(model, args.adapter)
    loaded = sum(1 for n, _ in model.named_parameters() if "lora_" in n)
    with torch.no_grad():
        loss = step_loss(model, tokens_of(c, args.dir, torch), False, torch)
    print(f"adapter {args.adapter}: {loaded} LoRA tensors, loss {loss.item():.7f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=["make", "args", "compare", "adapter"])
    p.add_argument("--config", default="8b2", choices=sorted(CONFIGS))
    p.add_argument("--dir", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--modes", default="fp32,tf32,bf16")
    p.add_argument("--json", default=None)
    p.add_argument("--adapter", default=None, help="adapter: the PEFT adapter's directory")
    p.add_argument("--checkpoint", action="store_true",
                   help="make: also save the model as transformers does, in DIR/checkpoint")
    args = p.parse_args()
    c = CONFIGS[args.config]
    if args.what == "args":
        print(" ".join(str(a) for a in trainer_args(c, args.dir)))
        return
    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_llama: CUDA is not available")
    os.makedirs(args.dir, exist_ok=True)
    if args.what == "make":
        make(args, c, torch)
    elif args.what == "adapter":
        adapter(args, c, torch)
    else:
        args.json = args.json or os.path.join(args.dir, "torch.json")
        compare(args, c, torch)


if __name__ == "__main__":
    main()
