"""The new model's checks, pure: the model argument of real server command lines, what the weights
check printed, why it refuses, and whether the weights fit the unit's GPUs (with the numbers)."""

import pytest

from bot.flows.actions.model_check import (
    Weights,
    fit,
    parse_unit_command,
    parse_weights,
    visible_gpus,
    weights_problems,
)
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import Disk, Gpu
from bot.probing.probes.servers import ServedModel, exec_argv, served_model

GB = 10**9


# Command lines as the servers' own documentation and model cards give them (vLLM, SGLang, TGI, llama.cpp),
# some as systemd's ExecStart shows them.
@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "{ path=/opt/vllm/bin/vllm ; argv[]=/opt/vllm/bin/vllm serve /shared/Kimi-K2.5-NVFP4 "
            "--tensor-parallel-size 8 "
            "--trust-remote-code --port 8000 ; ignore_errors=no ; start_time=[n/a] }",
            ServedModel("vLLM", "/shared/Kimi-K2.5-NVFP4", "positional", 8, None, 0.9),
        ),
        (
            "vllm serve moonshotai/Kimi-K2-Instruct --trust-remote-code --tensor-parallel-size 16 "
            "--enable-auto-tool-choice",
            ServedModel("vLLM", "moonshotai/Kimi-K2-Instruct", "positional", 16, None, 0.9),
        ),
        (
            "vllm serve --port 8001 /models/glm -tp 4 -pp 2 --gpu-memory-utilization 0.95",
            ServedModel("vLLM", "/models/glm", "positional", 4, 2, 0.95, True),
        ),
        (
            "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model /shared/Qwen3-235B "
            "--tensor-parallel-size=8",
            ServedModel("vLLM", "/shared/Qwen3-235B", "--model", 8, None, 0.9),
        ),
        (
            "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code "
            "--mem-fraction-static 0.85",
            ServedModel("SGLang", "deepseek-ai/DeepSeek-V3", "--model-path", 8, None, 0.85, True),
        ),
        (
            "text-generation-launcher --model-id meta-llama/Llama-3.1-70B-Instruct --num-shard 4 --port 8080",
            ServedModel("TGI", "meta-llama/Llama-3.1-70B-Instruct", "--model-id", 4, None, None),
        ),
        (
            "/usr/local/bin/llama-server -m /shared/glm5-gguf/GLM-5-Q4_K_M-00001-of-00009.gguf --port 8080 -ngl "
            "99 -c 32768",
            ServedModel("llama.cpp", "/shared/glm5-gguf/GLM-5-Q4_K_M-00001-of-00009.gguf", "-m", None, None, None),
        ),
        (
            "llama-server --model /models/qwen.gguf --host 0.0.0.0",
            ServedModel("llama.cpp", "/models/qwen.gguf", "--model"),
        ),
    ],
)
def test_the_model_argument_of_each_server(line, want):
    assert served_model(exec_argv(line)) == want


def test_no_model_is_no_model():
    assert served_model(exec_argv("/usr/bin/python3 train.py --model /x")) is None  # no server we know
    assert served_model(exec_argv("vllm serve --port 8000")) is None
    assert (
        served_model(exec_argv("vllm serve /m --gpu-memory-utilization 1.5")).gpu_memory_utilization == 0.9
    )  # out of range


def test_the_unit_command_with_its_environment():
    out = ProbeOutput(
        "unit",
        "ExecStart={ path=/usr/bin/vllm ; argv[]=/usr/bin/vllm serve /m -tp 2 ; ignore_errors=no }\n"
        'Environment=CUDA_VISIBLE_DEVICES=2,3 HF_HOME=/shared/hf "A=b c"\n',
        "",
        0,
    )
    cmd = parse_unit_command(out)
    assert cmd.argv == ["/usr/bin/vllm", "serve", "/m", "-tp", "2"] and cmd.cuda_devices == ("2", "3")
    assert cmd.env["HF_HOME"] == "/shared/hf" and cmd.env["A"] == "b c"
    assert parse_unit_command(ProbeOutput("unit", "ExecStart=\nEnvironment=\n", "", 0)).cuda_devices is None
    assert (
        parse_unit_command(ProbeOutput("unit", "", "Failed to connect to bus", 1)).error == "Failed to connect to bus"
    )


def hexed(text: str) -> str:
    return text.encode().hex()


def frames(stdout: str, df_avail: int = 1_300 * GB) -> dict[str, ProbeOutput]:
    df = (
        f"Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/md0 {3_800 * GB} {2_500 * GB} "
        f"{df_avail} 66% /shared\n"
    )
    return {"weights": ProbeOutput("weights", stdout, "", 0), "df": ProbeOutput("df", df, "", 0)}


def test_a_folder_with_a_shard_missing_is_refused_with_what_to_download():
    out = "\n".join(
        [
            "exists=yes",
            f"real={hexed('/shared/Kimi')}",
            "type=dir",
            "index=yes",
            f"total={540 * GB}",
            *(f"shard {10 * GB} {hexed(f'model-{i:05d}-of-00054.safetensors')}" for i in range(1, 53)),
            f"shard - {hexed('model-00053-of-00054.safetensors')}",
            f"shard - {hexed('model-00054-of-00054.safetensors')}",
        ]
    )
    w = parse_weights("/shared/Kimi", frames(out))
    assert (
        w.exists
        and w.is_dir
        and w.missing_shards == ["model-00053-of-00054.safetensors", "model-00054-of-00054.safetensors"]
    )
    assert w.weights_bytes == 520 * GB and w.disk.avail_bytes == 1_300 * GB and w.disk.path == "/shared"
    (why,) = weights_problems(w, where="the model of k.service's ExecStart", host="node174", need_bytes=None)
    assert why == (
        "`/shared/Kimi` (the model of k.service's ExecStart) is incomplete: 2 of 54 shards named in "
        "model.safetensors.index.json missing (model-00053-of-00054.safetensors, model-00054-of-00054.safetensors); "
        "the index says 540 GB in all, 520 GB present: about 20 GB to download (need=20GB); /shared: 1.3 TB free"
    )


def test_missing_weights_and_a_running_download_are_refused():
    gone = parse_weights("/shared/Kimi", frames("exists=no\n"))
    (why,) = weights_problems(gone, where="--model of k.service's ExecStart", host="node174", need_bytes=540 * GB)
    assert why == (
        "`/shared/Kimi` (--model of k.service's ExecStart) does not exist on node174: download the weights first "
        "(/shared: 1.3 TB free; give need=SIZE of the model so the pivot checks room for it; need=540GB was asked)"
    )
    running = parse_weights(
        "/shared/Kimi",
        frames(
            "\n".join(
                [
                    "exists=yes",
                    f"real={hexed('/shared/Kimi')}",
                    "type=dir",
                    f"file {GB} {hexed('model.safetensors')}",
                    f"incomplete {hexed('/shared/Kimi/.cache/huggingface/download/model.safetensors.abc.incomplete')}",
                ]
            )
        ),
    )
    (why,) = weights_problems(running, where="w", host="h", need_bytes=None)
    assert "a download is still running or was cut: 1 .incomplete file (model.safetensors.abc.incomplete)" in why
    empty = parse_weights("/shared/Kimi", frames(f"exists=yes\nreal={hexed('/shared/Kimi')}\ntype=dir\n"))
    assert "holds no weight file" in weights_problems(empty, where="w", host="h", need_bytes=None)[0]
    nocache = parse_weights("org/name", frames("hub=none\n"))
    assert weights_problems(nocache, where="w", host="h", need_bytes=None)[0].startswith(
        "`org/name` (w) is not in any Hugging Face cache on h"
    )


def test_a_split_gguf_needs_every_part():
    first = "/shared/glm5-gguf/GLM-5-Q4_K_M-00001-of-00003.gguf"
    out = "\n".join(
        [
            "exists=yes",
            f"real={hexed(first)}",
            "type=file",
            f"file {100 * GB} {hexed('GLM-5-Q4_K_M-00001-of-00003.gguf')}",
            f"file {100 * GB} {hexed('GLM-5-Q4_K_M-00003-of-00003.gguf')}",
            f"file {GB} {hexed('other.gguf')}",
        ]
    )
    w = parse_weights(first, frames(out))
    assert w.missing_shards == ["GLM-5-Q4_K_M-00002-of-00003.gguf"] and w.weights_bytes == 200 * GB
    assert (
        "1 split GGUF part missing (GLM-5-Q4_K_M-00002-of-00003.gguf)"
        in weights_problems(w, where="w", host="h", need_bytes=None)[0]
    )


def rtx(i: int) -> Gpu:
    return Gpu(i, f"GPU-{i}", "NVIDIA RTX PRO 6000 Blackwell", 97887, 0, 500, 0, 30, 80.0, "Disabled")


def test_the_seed_pivot_fits_with_its_kv_cache_per_gpu():
    """540 GB of Kimi over node174's 8 × 97,887 MiB at vLLM's default 0.9."""
    f = fit(ServedModel("vLLM", "/shared/Kimi", "--model", 8, None, 0.9), 540 * GB, None, [rtx(i) for i in range(8)])
    assert f.fits and f.weights_mib_per_gpu == 64_374 and f.kv_mib_per_gpu == 88_098 - 64_374
    assert f.line == (
        "fits: 540 GB of weights over 8 GPUs (TP 8) with --gpu-memory-utilization 0.90 (default): 64,374 MiB of "
        "weights per GPU of 88,098 MiB usable (97,887 MiB × 0.90); 23,724 MiB left for the KV cache per GPU"
    )


def test_weights_that_cannot_fit_are_refused_with_the_numbers():
    one = fit(
        ServedModel("vLLM", "/shared/Kimi", "positional", None, None, 0.9), 540 * GB, None, [rtx(i) for i in range(8)]
    )
    assert one.fits is False and one.line == (
        "the weights do not fit: 540 GB of weights over 1 GPU (TP 1) with --gpu-memory-utilization 0.90 (default): "
        "514,985 MiB of weights per GPU of 88,098 MiB usable (97,887 MiB × 0.90), 426,887 MiB short per GPU"
    )
    few = fit(ServedModel("vLLM", "/m", "--model", 8), 540 * GB, ("0", "1", "2", "3"), [rtx(i) for i in range(8)])
    assert few.fits is False and few.line == "vLLM asks for 8 GPUs (TP 8) but CUDA_VISIBLE_DEVICES=0,1,2,3 gives 4"
    sg = fit(
        ServedModel("SGLang", "/m", "--model-path", 4, None, 0.5, True), 540 * GB, None, [rtx(i) for i in range(8)]
    )
    assert sg.fits is False and "with --mem-fraction-static 0.50:" in sg.line


def test_cuda_visible_devices_by_index_or_uuid():
    gpus = [rtx(i) for i in range(4)]
    assert [g.index for g in visible_gpus(("3", "GPU-1"), gpus)] == [3, 1]
    assert visible_gpus(("7",), gpus) is None and visible_gpus(None, gpus) == gpus
    assert fit(ServedModel("vLLM", "/m", "--model", 2), GB, ("7",), gpus).fits is None


def test_unknown_sizes_are_not_judged():
    assert fit(ServedModel("vLLM", "/m", "--model"), None, None, [rtx(0)]).fits is None
    assert Weights("/m", "/m", True, files={"a.safetensors": None}).weights_bytes is None
    assert Disk("/", avail_bytes=1).avail_bytes == 1
