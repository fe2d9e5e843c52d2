"""``benchmarks/training_throughput.py`` as the GPU machine runs it, in its CPU mode with a
tiny encoder and the GPU's path through the model (``--no-cpu-shortcuts``: no
real-token packing, torch's dropout masks), every method, and with Kedro, datasets,
spaCy and DVC made unimportable, as they are on the device image: the script is only
ever run on CUDA when a device is lent, so a break in it would otherwise show up
first in that scarce time. Real mirror data (wiki sentences, WikiText articles, STS
dev) as on the device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import load_script
from tests.training.test_declutr import documents, span_table  # noqa: F401 - fixtures

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "training_throughput.py"
METHODS = {"simcse", "imsimcse", "scd", "declutr", "clsr"}
# Runs the script given as the first argument with the packages the GPU image lacks
# unimportable (None in sys.modules: `import kedro` fails, find_spec says absent).
NOT_ON_THE_DEVICE = """
import runpy, sys
for name in ("kedro", "kedro_datasets", "datasets", "spacy", "dvc"):
    sys.modules[name] = None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, mirror_dir):
    folder = tmp_path_factory.mktemp("throughput")
    output, traces = folder / "result.json", folder / "traces"
    command = [sys.executable, "-c", NOT_ON_THE_DEVICE, str(SCRIPT), "--device", "cpu", "--encoder-config", "tiny",
               "--methods", ",".join(sorted(METHODS)), "--steps", "1", "--warmup", "1", "--no-peer",
               "--profile", "2", "--trace-dir", str(traces), "--no-cpu-shortcuts", "--mirror", str(mirror_dir), "--output", str(output),
               # YAML reads the word as false: the training settings take it as "no"; YAML 1.1 reads an
               # exponent without a dot as a string, Kedro (OmegaConf) as a float: so must --set
               "--set", "mixed_precision=no", "--set", "learning_rate=1e-5"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(output.read_text(encoding="utf-8")), traces, done.stdout


def test_every_requested_method_trains_and_is_measured(smoke_run):
    report, _, _ = smoke_run
    rows = {row["method"]: row for row in report["rows"]}
    assert set(rows) == METHODS
    assert report["cpu_shortcuts"] is False
    assert report["training_settings"]["learning_rate"] == pytest.approx(1e-5)
    for name, row in rows.items():
        assert "error" not in row, row
        assert row["cpu_shortcuts"] is False
        assert row["precision"] == "no"  # --set mixed_precision=no reached the trainer as the word
        assert row["examples_per_second"] > 0 and row["step_ms"] > 0
        if name != "clsr":  # CLSR trains on cached embeddings: no tokens
            assert 0 < row["padding_share"] < 1  # real batches: some padding, not all
    for name in ("simcse", "imsimcse", "scd"):  # the dev evaluation's cost, for the sentence methods
        assert rows[name]["dev_eval_seconds"] > 0 and 0 < rows[name]["dev_eval_share_of_125_steps"]
    assert rows["declutr"]["encoder_passes_per_step"] > 1  # length buckets: several passes a step
    assert rows["simcse"]["encoder_passes_per_step"] == 1  # both views in one doubled batch
    # the paper's DeCLUTR block, recorded with the row; the shapes its passes had
    assert (rows["declutr"]["bucket_tokens"], rows["declutr"]["pad_to_multiple_of"]) == (8192, 1)
    assert rows["declutr"]["attention_backends"] == ["flash", "efficient", "math"]  # its block's, as trained
    assert rows["simcse"]["attention_backends"] == "any"
    for name, row in rows.items():
        if name == "clsr":
            assert row["attention_kernel"] is None and "distinct_pass_shapes" not in row
            continue
        # the GPU's path on a CPU: SDPA with dropout, which only the math backend does here
        assert row["attention_kernel"].startswith("math (decomposed: ")
        assert row["distinct_pass_shapes"] >= 1 and row["new_pass_shapes_per_timed_step"] >= 0


def test_the_profile_records_whole_training_steps(smoke_run):
    report, traces, stdout = smoke_run
    profiles = {profile["method"]: profile for profile in report["profiles"]}
    assert set(profiles) == METHODS
    for name, profile in profiles.items():
        assert "error" not in profile, profile
        assert profile["steps_recorded"] == 2
        ops = profile["top_host_ops"]
        assert any(op["op"] in ("aten::mm", "aten::addmm", "aten::bmm") for op in ops)  # the encoder's matmuls
        # per step: the ops' own times cannot add up to more than the step they ran in
        assert sum(op["self_ms_per_step"] for op in ops) <= profile["step_ms_profiled"] * 1.02
        assert profile["host_reads_per_step"] >= 0
        assert 0 < profile["batch_ms_per_step"] < profile["step_ms_profiled"]  # the collate, inside the step
        assert "device_ms_per_step" not in profile  # no device figures are made up on CPU
        trace = traces / f"{name}_tiny_cpu.json"
        assert trace.is_file() and json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    # One step's host reads (each a wait for the device on a GPU), with the line behind
    # each: on the GPU's path none is ours (DeCLUTR's MLM gathers by the positions its
    # batch brings); transformers' padding-mask check reads once per encoder pass.
    for name, profile in profiles.items():
        sites = profile["host_read_sites"]
        assert all(row["count"] > 0 and row["kind"] in ("scalar", "size", "boolean index", "copy to host")
                   for row in sites), sites
        assert profile["host_reads_outside_batching"] == sum(row["count"] for row in sites)
        assert not [row for row in sites if row["site"].startswith("contrastive_sentence_embeddings/")], (name, sites)
        # the reads while batches are built (host tensors) are in the profiler's count only
        assert profile["host_reads_per_step"] >= profile["host_reads_outside_batching"]
    assert "host reads of one step:" in stdout
    # the step that trains on length buckets of up to 512 tokens costs more than 64 short sentences
    assert profiles["declutr"]["step_ms_profiled"] > profiles["simcse"]["step_ms_profiled"]
    assert "step ms (profiled)" in stdout  # the table a person reads


def test_the_ablation_runs_the_variants_named_in_the_order_named():
    """--ablation KEYS: the order is the priority (device_check.sh puts the settings never
    measured on a GPU first, and a run stopped at its budget keeps the rows it finished)."""
    benchmark = load_script(SCRIPT)
    chosen = benchmark.ablation_variants("cuda-graphs,default,static-shapes,default", "cuda")
    assert [key for key, *_ in chosen] == ["cuda-graphs", "default", "static-shapes"]
    assert chosen[0][2] == {"compile": True, "compile_mode": "reduce-overhead", "static_shapes": True}
    everything = [key for key, *_ in benchmark.ablation_variants("all", "cuda")]
    assert everything == [key for key, *_ in benchmark.ABLATION_VARIANTS]
    on_cpu = [key for key, *_ in benchmark.ablation_variants("all", "cpu")]
    assert on_cpu == [key for key in everything if key not in benchmark.CUDA_ONLY_VARIANTS]
    assert "static-shapes" in on_cpu and "cuda-graphs" not in on_cpu
    with pytest.raises(ValueError, match=r"unknown ablation variant\(s\) \['cuda-graph'\]"):
        benchmark.ablation_variants("default,cuda-graph", "cuda")
    with pytest.raises(ValueError, match="CUDA-only"):
        benchmark.ablation_variants("default,cuda-graphs", "cpu")


def test_declutrs_variants_name_their_method_and_cudnn_is_cuda_only():
    benchmark = load_script(SCRIPT)
    chosen = benchmark.ablation_variants("declutr-pad-8,declutr-bucket-32768", "cpu")
    assert [(extra["method"], extra["method_settings"]) for *_, extra in chosen] == [
        ("declutr", {"pad_to_multiple_of": 8}), ("declutr", {"bucket_tokens": 32768})]
    for cuda_only in ("declutr-cudnn-attention", "declutr-cudnn-avoid-recompile", "no-cudnn-attention"):
        with pytest.raises(ValueError, match="CUDA-only"):
            benchmark.ablation_variants(cuda_only, "cpu")
    (_, _, settings, extra), = benchmark.ablation_variants("declutr-cudnn-avoid-recompile", "cuda")
    assert extra["environment"] == {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}  # a process of its own
    assert settings == {"attention_backends": None}  # PyTorch's choice, over DeCLUTR's own list
    (_, _, settings, _), = benchmark.ablation_variants("declutr-cudnn-attention", "cuda")
    assert settings == {"attention_backends": None}
    (_, _, settings, _), = benchmark.ablation_variants("no-cudnn-attention", "cuda")
    assert "cudnn" not in settings["attention_backends"] and "math" in settings["attention_backends"]


def test_declutrs_rows_train_with_its_blocks_attention_backends_unless_a_variant_says_otherwise():
    """DeCLUTR's block leaves cuDNN's attention out (conf/base); a variant's training
    setting of null gives PyTorch's choice back, through the same block parsing the
    training node uses."""
    benchmark = load_script(SCRIPT)
    block = lambda name, **training: benchmark.method_block(name, {"training": {"seed": 42, **training}})  # noqa: E731
    assert block("declutr").training.attention_backends == ["flash", "efficient", "math"]
    assert block("declutr", attention_backends=None).training.attention_backends is None
    assert block("simcse").training.attention_backends is None


def test_the_attention_kernel_probe_sees_the_backends_allowed_and_dropout(tiny_bert, tokenizer):
    """On a CPU, SDPA has a fused kernel for attention without dropout only: a training
    pass (attention dropout on) runs the math backend's ops, as the GPU-path rows of
    the smoke run above say; with dropout off, the fused kernel unless the backends
    allowed leave it out."""
    import copy

    import torch

    from contrastive_sentence_embeddings.training.dropout import dropout_off
    from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method

    benchmark = load_script(SCRIPT)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls", build_method("simcse"), real_tokens_only=False,
                             uniform_dropout=False)
    assert model.encoder.config._attn_implementation == "sdpa"
    probe = lambda: benchmark.model_attention_kernel(model, tokenizer, torch.device("cpu"), bf16=False)  # noqa: E731
    training_pass = probe()
    assert training_pass.startswith("math (decomposed: ") and "bernoulli_" in training_pass  # SDPA's own dropout
    with dropout_off(model.encoder):
        assert probe() == "_scaled_dot_product_flash_attention_for_cpu"
        with benchmark.allowed_attention(["math"]):
            assert probe().startswith("math (decomposed: ")
        with benchmark.allowed_attention(None):  # PyTorch's own choice again
            assert probe() == "_scaled_dot_product_flash_attention_for_cpu"
    model.eval()
    probe()
    assert not model.training and not model.encoder.training  # put back as it was found


def test_a_variant_in_a_process_of_its_own_gets_its_method_settings_and_variables(mirror_dir):
    """What runs DeCLUTR with TORCH_CUDNN_SDPA_AVOID_RECOMPILE on a GPU (the variable is
    read once a process), rehearsed on CPU: the child trains with the method settings
    given and records the variable it was started with."""
    from argparse import Namespace

    benchmark = load_script(SCRIPT)
    args = Namespace(device="cpu", steps=1, warmup=1, mirror=str(mirror_dir), cpu_shortcuts=False, tokenizer=None,
                     training_settings={"mixed_precision": "no"}, method_settings={})
    row = benchmark.variant_in_subprocess("rehearsal", "declutr", "tiny", args, {}, {"pad_to_multiple_of": 64},
                                          {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"})
    assert "error" not in row, row
    assert row["method"] == "declutr" and row["variant"] == "rehearsal" and row["pad_to_multiple_of"] == 64
    assert row["environment"]["TORCH_CUDNN_SDPA_AVOID_RECOMPILE"] == "1"


def test_method_settings_from_the_command_line_reach_every_run(tmp_path, mirror_dir):
    output = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--encoder-config", "tiny", "--methods",
                           "declutr", "--steps", "1", "--warmup", "1", "--no-peer", "--no-eval-cost",
                           "--no-cpu-shortcuts", "--mirror", str(mirror_dir), "--method-set", "pad_to_multiple_of=64",
                           "--ablation", "declutr-pad-8", "--output", str(output)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text(encoding="utf-8"))
    assert report["method_settings"] == {"pad_to_multiple_of": 64}
    assert report["rows"][0]["pad_to_multiple_of"] == 64
    assert report["ablation"][0]["pad_to_multiple_of"] == 8  # the variant's own setting wins
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--method-set", "pad_to_multiple_of"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "expected KEY=VALUE" in done.stderr


def test_new_pass_shapes_are_counted_after_the_warm_up_only():
    benchmark = load_script(SCRIPT)
    counter = benchmark.WorkCounter(None, [])
    # step 0: (8, 100) and (4, 200); step 1: (8, 100) again and a new (8, 96); step 2: (4, 200), (2, 300)
    counter.pass_shapes = [(0, 8, 100), (0, 4, 200), (1, 8, 100), (1, 8, 96), (2, 4, 200), (2, 2, 300)]
    counter.steps_done = 3
    assert counter.shape_summary(1) == {"distinct_pass_shapes": 4, "new_pass_shapes_per_timed_step": 1.0}
    assert counter.shape_summary(0) == {"distinct_pass_shapes": 4, "new_pass_shapes_per_timed_step": round(4 / 3, 2)}
    assert counter.shape_summary(3)["new_pass_shapes_per_timed_step"] is None  # no timed step


def test_an_unknown_ablation_variant_is_refused_before_anything_runs():
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--ablation", "default,fast"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--ablation: unknown ablation variant(s) ['fast']" in done.stderr


def test_a_step_is_counted_once_though_cuda_copies_its_range_onto_the_device_timeline():
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    benchmark = load_script(SCRIPT)
    host = [SimpleNamespace(name=f"ProfilerStep#{n}", device_type=DeviceType.CPU) for n in (3, 4)]
    on_device = [SimpleNamespace(name="ProfilerStep#4", device_type=DeviceType.CUDA)]  # a gpu_user_annotation
    others = [SimpleNamespace(name="aten::mm", device_type=DeviceType.CPU)]
    assert benchmark.profiler_steps(host[:1] + on_device + others + host[1:]) == host


@pytest.mark.parametrize("kind", ["simcse", "declutr"])
def test_gradient_cachings_first_pass_is_hardware_work_not_model_work(kind, tokenizer, tiny_bert, tiny_bert_dir,
                                                                       documents, span_table):  # noqa: F811
    """A step in mini-batches computes every embedding twice (once without a graph, once
    to back-propagate). MFU counts the step's model work once, as the whole-batch step
    does: the same model FLOPs and tokens; the first pass shows in the hardware FLOPs only
    (on the sentence batch, cut into equal halves, exactly one forward more)."""
    import copy

    import torch

    from contrastive_sentence_embeddings.encoders.encoding import pad_batch
    from contrastive_sentence_embeddings.training.gradient_cache import GradientCache
    from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
    from tests.training.test_declutr import make_collate

    benchmark = load_script(SCRIPT)
    method = build_method(kind, {"bucket_tokens": 300, "mlm": True} if kind == "declutr" else {})
    if kind == "declutr":
        batch = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=300)(
            documents["doc_id"].tolist()[:4])
        batch_size = 4
    else:
        longest = "Two dogs run across the snowy field together after the storm."  # in both halves
        sentences = ["A man is playing a guitar.", longest, "The committee met on Tuesday.", "She reads.",
                     "Prices rose sharply.", longest, "The river floods every spring.", "He left."]
        batch = pad_batch(tokenizer(sentences)["input_ids"], tokenizer.pad_token_id)
        batch_size = len(sentences)
    totals = {}
    for how in ("whole", "mini-batches"):
        torch.manual_seed(0)
        encoder = copy.deepcopy(tiny_bert)
        model = ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder))
        model.train()
        counter = benchmark.WorkCounter(model.encoder, list(model.heads.values()))
        encoder_alone = benchmark.WorkCounter(model.encoder, [])
        with benchmark.counted_as_recomputation(counter), benchmark.counted_as_recomputation(encoder_alone):
            if how == "whole":
                model(**batch)["loss"].backward()
            else:
                GradientCache(model, batch_size, batch_size // 2).step(batch)
        counter.remove()
        encoder_alone.remove()
        totals[how] = counter.totals(), encoder_alone.totals()
    (whole, whole_encoder), (cached, cached_encoder) = totals["whole"], totals["mini-batches"]
    assert cached["model_flops"] == pytest.approx(whole["model_flops"], rel=1e-12)
    assert cached["real_tokens"] == whole["real_tokens"] > 0
    assert cached["hardware_flops"] > whole["hardware_flops"]
    if kind == "simcse":  # both halves as wide as the whole batch: the encoder did exactly one forward more
        # (SimCSE's MLP head runs once either way, on the whole batch's embeddings)
        assert cached_encoder["padded_tokens"] == whole_encoder["padded_tokens"]
        assert cached_encoder["hardware_flops"] == pytest.approx(whole_encoder["hardware_flops"] * 4 / 3, rel=1e-12)


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989.4e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835.5e12),
    ("NVIDIA H200", 989.4e12), ("NVIDIA GH200 480GB", 989.4e12), ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA L40S", 362.05e12), ("NVIDIA L40", 181.05e12), ("NVIDIA L4", 121e12), ("NVIDIA A10G", 70e12),
    ("NVIDIA A10", 125e12), ("Tesla T4", None),
])
def test_each_gpu_gets_its_own_stated_bf16_peak(name, peak):
    """MFU's denominator by the name CUDA reports: a name containing another device's
    name (an L40S contains "L4", an A100 "A10", an H100 NVL "H100") gets its own peak,
    and an unlisted device none (MFU not reported rather than wrong)."""
    assert load_script(SCRIPT).stated_peak(name) == peak
