"""A small OpenAI-compatible model server with RANDOM weights, for checking gpubot's answer check on a real GPU
(no vLLM needed, nothing downloaded). Needs torch and transformers; CI never runs this.

    python tools/answer_server.py [--port 8000] [--layers 16] [--hidden 2048] [--vocab 32000]

The model is a Llama built from a config (``LlamaConfig``) with random weights in bf16 on the first GPU; its
tokenizer is synthetic: ids 0-255 are bytes, 256-258 BOS/EOS/PAD, every other id a made-up word, so a prompt is read
as UTF-8 bytes and the answer is whatever the random model picks greedily (temperature 0): never a right answer.
Serves ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST /v1/completions``, streamed
(Server-Sent Events, ``stream_options.include_usage``) or not, one request at a time, with a KV cache. Each answer's
own timing (first token, tokens per second as the server counts them) goes to stderr, to compare with the check's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOS, EOS, PAD = 256, 257, 258
MODEL_ID = "random-llama"


def made_up_vocab(size: int) -> list[bytes]:
    """Bytes for every id: 0-255 themselves, specials empty, the rest deterministic made-up words."""
    vocab = [bytes([i]) for i in range(256)] + [b"", b"", b""]
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(259, size):
        r = random.Random(i)
        word = "".join(r.choice(letters) for _ in range(r.randint(2, 7)))
        vocab.append(((" " if r.random() < 0.6 else "") + word).encode())
    return vocab


class Model:
    def __init__(self, args: argparse.Namespace):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        self.torch = torch
        torch.manual_seed(args.seed)
        config = LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            intermediate_size=args.hidden * 11 // 4,
            num_hidden_layers=args.layers,
            num_attention_heads=args.hidden // 128,
            num_key_value_heads=max(1, args.hidden // 512),
            max_position_embeddings=4096,
            bos_token_id=BOS,
            eos_token_id=EOS,
            pad_token_id=PAD,
        )
        started = time.monotonic()
        with torch.device("cuda"):
            self.model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
        self.params = sum(p.numel() for p in self.model.parameters())
        self.vocab = made_up_vocab(args.vocab)
        self.lock = threading.Lock()
        self.generate([BOS, 72, 105], 4, lambda *_: None)  # warm up (cuBLAS, kernels), as servers do at start
        print(
            f"model: {self.params / 1e9:.2f} B parameters, {args.layers} layers, hidden {args.hidden}, bf16 on "
            f"{torch.cuda.get_device_name(0)}; built and warmed up in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    def encode(self, text: str) -> list[int]:
        return [BOS, *text.encode("utf-8")]

    def generate(self, ids: list[int], max_tokens: int, emit: Any) -> tuple[int, str]:
        """Greedy decoding; ``emit(text, index)`` per token; returns (tokens, finish reason)."""
        torch = self.torch
        with self.lock, torch.inference_mode():
            x = torch.tensor([ids], device="cuda")
            past, n, t0, first = None, 0, time.monotonic(), None
            pending = b""
            while n < max_tokens:
                out = self.model(input_ids=x, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = int(out.logits[0, -1].argmax())
                n += 1
                if first is None:
                    first = time.monotonic() - t0
                if nxt == EOS:
                    break
                pending += self.vocab[nxt]
                try:  # hold back a cut UTF-8 sequence until it completes (as servers do)
                    text, pending = pending.decode("utf-8"), b""
                except UnicodeDecodeError as exc:
                    if exc.start == 0 and len(pending) < 4:
                        text = ""
                    else:
                        text, pending = pending.decode("utf-8", "replace"), b""
                emit(text, n)
                x = torch.tensor([[nxt]], device="cuda")
            torch.cuda.synchronize()
            took = time.monotonic() - t0
            rate = (n - 1) / (took - first) if first is not None and n > 1 and took > first else 0.0
            print(
                f"answer: {n} tokens, first after {first or 0:.3f} s, {rate:.1f} tok/s after it (server's count)",
                file=sys.stderr,
                flush=True,
            )
            return n, "stop" if nxt == EOS else "length"


def handler(model: Model) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def json_doc(self, status: int, doc: dict[str, Any]) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/v1/models":
                self.json_doc(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
            else:
                self.json_doc(404, {"detail": "Not Found"})

        def do_POST(self) -> None:  # noqa: N802
            chat = self.path == "/v1/chat/completions"
            if not chat and self.path != "/v1/completions":
                return self.json_doc(404, {"detail": "Not Found"})
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if req.get("model") != MODEL_ID:
                return self.json_doc(404, {"error": {"message": f"The model `{req.get('model')}` does not exist."}})
            if chat:
                prompt = (
                    "".join(f"{m.get('role')}: {m.get('content')}\n" for m in req.get("messages", [])) + "assistant:"
                )
            else:
                prompt = str(req.get("prompt", ""))
            ids = model.encode(prompt)
            max_tokens = int(req.get("max_tokens") or 16)
            kind = "chat.completion.chunk" if chat else "text_completion"

            def choice(text: str, finish: str | None = None) -> dict[str, Any]:
                if chat:
                    return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
                return {"index": 0, "text": text, "finish_reason": finish}

            if not req.get("stream"):
                parts: list[str] = []
                n, finish = model.generate(ids, max_tokens, lambda text, _: parts.append(text))
                c = {"message": {"role": "assistant", "content": "".join(parts)}} if chat else {"text": "".join(parts)}
                usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
                return self.json_doc(200, {"choices": [{"index": 0, **c, "finish_reason": finish}], "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def send(doc: dict[str, Any]) -> None:
                self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
                self.wfile.flush()

            if chat:
                send({"object": kind, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            n, finish = model.generate(
                ids, max_tokens, lambda text, _: send({"object": kind, "choices": [choice(text)]})
            )
            send({"object": kind, "choices": [choice("", finish)]})
            if (req.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
                send({"object": kind, "choices": [], "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    model = Model(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(model))
    print(f"serving {MODEL_ID} on http://127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
