"""Local-runtime comparison for issue 29: prompt and generation speed of one GGUF model in
each candidate runtime, plus three answers to eyeball quality.

Standalone on purpose (stdlib plus the runtime under test): each runtime is installed into
its own fresh virtualenv, so the install time measured is that runtime's alone.

    /tmp/v-xllamacpp/bin/python bench/runtimes.py xllamacpp MODEL.gguf

prints one JSON line: load seconds; prompt tokens/s over a ~500-token prompt (about the
local prompt budget) and generation tokens/s over up to 60 tokens, both from the
runtime's own timers (wall clock only for ctransformers); the reply's wall time;
/proc/loadavg before and after; the answers. Greedy decoding, two threads (the machine's
cores), prompt cache off so every run processes the whole prompt. Run the baseline right
before each candidate and compare ratios: the machine is shared, absolute numbers drift
with its load.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

THREADS = 2
POLL = int(os.environ.get("BENCH_POLL", "0"))  # ggml threadpool busy-wait level
# As workers/local_model.py does: spinning OpenMP threads starve each other on a busy
# 2-core machine (a turn then takes minutes), so measure what the product runs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
GEN_TOKENS = 60
NOTES = " ".join(
    f"Note {i}: the team meets on Mondays, likes tea, and keeps the build green."
    for i in range(24)
)
LONG = [
    {"role": "system", "content": "You are a helpful assistant. Notes:\n" + NOTES},
    {"role": "user", "content": "Write a short story about a lighthouse keeper."},
]
QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Who wrote Romeo and Juliet?",
]


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


Timed = tuple[str, int, float, int, float]  # text, prompt n, prompt s, generated n, gen s


class LlamaCppPython:
    def __init__(self, gguf: str) -> None:
        import llama_cpp

        self.mod = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=gguf, n_ctx=2048, n_threads=THREADS, n_threads_batch=THREADS,
            seed=0, verbose=False,
        )

    def chat(self, messages: list[dict[str, str]], max_tokens: int) -> Timed:
        self.llm.reset()  # no prefix reuse between runs
        ctx = self.llm._ctx.ctx
        self.mod.llama_perf_context_reset(ctx)
        out = self.llm.create_chat_completion(
            messages=messages, max_tokens=max_tokens, temperature=0.0
        )
        perf = self.mod.llama_perf_context(ctx)
        text = out["choices"][0]["message"]["content"] or ""
        return (text, perf.n_p_eval, perf.t_p_eval_ms / 1000, perf.n_eval,
                perf.t_eval_ms / 1000)


class XLlamaCpp:
    def __init__(self, gguf: str) -> None:
        import xllamacpp as xlc

        params = xlc.CommonParams()
        params.model.path = gguf
        params.n_ctx = 2048
        params.n_parallel = 1
        params.cpuparams.n_threads = THREADS
        params.cpuparams_batch.n_threads = THREADS
        params.cpuparams.poll = POLL
        params.cpuparams_batch.poll = POLL
        params.warmup = False
        self.server = xlc.Server(params)

    def chat(self, messages: list[dict[str, str]], max_tokens: int) -> Timed:
        out = self.server.handle_chat_completions(
            {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
             "cache_prompt": False}
        )
        t = out["timings"]
        text = out["choices"][0]["message"].get("content") or ""
        return (text, t["prompt_n"], t["prompt_ms"] / 1000, t["predicted_n"],
                t["predicted_ms"] / 1000)


class MistralRs:
    def __init__(self, gguf: str) -> None:
        import mistralrs

        path = Path(gguf)
        self.mod = mistralrs
        self.runner = mistralrs.Runner(
            which=mistralrs.Which.GGUF(
                quantized_model_id=str(path.parent), quantized_filename=path.name
            ),
            prefix_cache_n=0,
            token_source="none",  # no hub token: the file is local
        )

    def chat(self, messages: list[dict[str, str]], max_tokens: int) -> Timed:
        out: Any = self.runner.send_chat_completion_request(
            self.mod.ChatCompletionRequest(
                model="local", messages=messages, max_tokens=max_tokens, temperature=0.0
            )
        )
        u = out.usage
        return (out.choices[0].message.content or "", u.prompt_tokens,
                u.total_prompt_time_sec, u.completion_tokens, u.total_completion_time_sec)


class CTransformers:
    def __init__(self, gguf: str) -> None:
        from ctransformers import AutoModelForCausalLM

        self.llm = AutoModelForCausalLM.from_pretrained(
            gguf, model_type="llama", threads=THREADS, context_length=2048
        )

    def chat(self, messages: list[dict[str, str]], max_tokens: int) -> Timed:
        # ChatML by hand (SmolLM2's and Qwen's template): ctransformers has no chat API
        prompt = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages
        ) + "<|im_start|>assistant\n"
        tokens = self.llm.tokenize(prompt)
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval(tokens)
        t_prompt = time.perf_counter() - t0
        out: list[int] = []
        t0 = time.perf_counter()
        while len(out) < max_tokens:
            tok = self.llm.sample(temperature=0.0)
            if self.llm.is_eos_token(tok):
                break
            out.append(tok)
            self.llm.eval([tok])
        return (self.llm.detokenize(out), len(tokens), t_prompt, len(out),
                time.perf_counter() - t0)


RUNTIMES = {
    "llama-cpp-python": LlamaCppPython,
    "xllamacpp": XLlamaCpp,
    "mistralrs": MistralRs,
    "ctransformers": CTransformers,
}


def main(runtime: str, gguf: str) -> dict[str, Any]:
    result: dict[str, Any] = {"runtime": runtime, "model": Path(gguf).name,
                              "load_before": loadavg()}
    t0 = time.perf_counter()
    engine = RUNTIMES[runtime](gguf)
    result["load_s"] = round(time.perf_counter() - t0, 2)
    engine.chat([{"role": "user", "content": "Hi"}], 2)  # warm-up, not measured
    t0 = time.perf_counter()
    _, n_prompt, t_prompt, n_gen, t_gen = engine.chat(LONG, GEN_TOKENS)
    result["reply_s"] = round(time.perf_counter() - t0, 2)
    result["prompt_tokens"] = n_prompt
    result["prompt_tps"] = round(n_prompt / t_prompt, 1)
    result["gen_tokens"] = n_gen
    result["gen_tps"] = round(n_gen / t_gen, 1)
    result["answers"] = [engine.chat([{"role": "user", "content": q}], 40)[0].strip()
                         for q in QUESTIONS]
    result["load_after"] = loadavg()
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
