"""Deployment profiles: the numbers that make the simulator behave like one vLLM deployment.

A profile holds what the time model needs (engine.py): how many sequences the scheduler runs
at once, how fast a prompt is prefilled, the decode rate of one sequence alone and the
aggregate rate the batch tends to, and the shape of the output-length distribution. Numbers
taken from a publication name it next to the field; the others say they are estimates.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One model served by vLLM on one kind of hardware, as the simulator models it.

    Decode follows a linear step-time model: one engine step with ``b`` running sequences takes
    ``(b + b_half) / peak_decode_tokens_per_s`` seconds, so the aggregate decode rate is
    ``rate(b) = peak * b / (b + b_half)``. ``b_half`` is derived so that ``rate(1)`` equals the
    measured single-stream rate (see ``half_saturation_batch``).

    Attributes:
        name: the profile's name (``--profile``).
        models: the model names the server lists and accepts (vLLM's served model names).
        max_num_seqs: the most sequences the scheduler runs at once (vLLM ``--max-num-seqs``).
        prefill_tokens_per_s: prompt tokens processed per second when a sequence is admitted.
        decode_tokens_per_s_batch1: tokens per second of one sequence decoding alone.
        peak_decode_tokens_per_s: the aggregate decode rate large batches tend to (asymptote).
        request_overhead_s: latency of the API server per request (HTTP, chat template,
            tokenisation) before the request reaches the scheduler; not engine time.
        output_median_tokens, output_sigma: the lognormal output-length distribution
            (median and the σ of its logarithm).
        output_min_tokens, output_max_tokens: the shortest and longest output drawn (a
            request's ``max_tokens`` and its answer's own length still apply on top).
        max_model_len: context length; prompt plus output never exceed it.
        image_tokens: prompt tokens one image counts for.
        prefix_cache_tokens: prompt tokens the prefix cache keeps (vLLM's automatic prefix
            caching keeps the blocks of finished prompts in the free KV cache; the blocks the
            running sequences hold are not subtracted).
    """

    name: str
    models: tuple[str, ...]
    max_num_seqs: int
    prefill_tokens_per_s: float
    decode_tokens_per_s_batch1: float
    peak_decode_tokens_per_s: float
    request_overhead_s: float
    output_median_tokens: int
    output_sigma: float
    output_min_tokens: int
    output_max_tokens: int
    max_model_len: int
    image_tokens: int
    prefix_cache_tokens: int

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError(f"profile {self.name!r}: models must name at least one model")
        if self.max_num_seqs < 1:
            raise ValueError(f"profile {self.name!r}: max_num_seqs must be at least 1")
        if not 0 < self.decode_tokens_per_s_batch1 < self.peak_decode_tokens_per_s:
            raise ValueError(
                f"profile {self.name!r}: need 0 < decode_tokens_per_s_batch1 "
                "< peak_decode_tokens_per_s"
            )
        if self.prefill_tokens_per_s <= 0 or self.request_overhead_s < 0:
            raise ValueError(f"profile {self.name!r}: rates must be positive, overheads ≥ 0")
        lengths = (
            1,
            self.output_min_tokens,
            self.output_median_tokens,
            self.output_max_tokens,
            self.max_model_len,
        )
        if list(lengths) != sorted(lengths):
            raise ValueError(
                f"profile {self.name!r}: need 1 ≤ output_min_tokens ≤ output_median_tokens "
                "≤ output_max_tokens ≤ max_model_len"
            )

    @property
    def half_saturation_batch(self) -> float:
        """``b_half``: the batch at which the aggregate decode rate is half its asymptote.

        From ``rate(1) = peak / (1 + b_half)`` = the single-stream rate.
        """
        return self.peak_decode_tokens_per_s / self.decode_tokens_per_s_batch1 - 1.0

    @property
    def saturation_batch(self) -> float:
        """The batch at which the aggregate decode rate reaches 90 % of its asymptote."""
        return 9.0 * self.half_saturation_batch

    def decode_rate(self, batch: int) -> float:
        """Aggregate decode tokens per second with ``batch`` sequences running."""
        return self.peak_decode_tokens_per_s * batch / (batch + self.half_saturation_batch)

    def decode_step_seconds(self, batch: int) -> float:
        """Seconds of one decode step (one token for every running sequence)."""
        return (batch + self.half_saturation_batch) / self.peak_decode_tokens_per_s


# Qwen3-8B (BF16) served by `vllm serve Qwen/Qwen3-8B` on one H100 80GB SXM.
#
# [gpustack-8b] GPUStack performance lab, "Optimizing Qwen3-8B Latency on NVIDIA H100 GPUs"
#   (https://docs.gpustack.ai/latest/performance-lab/qwen3-8b/h100-latency), baseline
#   `vllm serve Qwen/Qwen3-8B`, vLLM v0.11.0, one H100 SXM, ShareGPT via `vllm bench serve`:
#   BS=1 mean TPOT 7.28 ms (→ 137 tok/s single stream), mean TTFT 59 ms; BS=4 TPOT 7.38 ms;
#   BS=8 TPOT 7.71 ms; 22,061 generated tokens over 100 requests (mean ≈ 220 per request).
# [gpustack-14b] GPUStack performance lab, "Optimizing Qwen3-14B Throughput on NVIDIA H100
#   GPUs" (https://docs.gpustack.ai/latest/performance-lab/qwen3-14b/h100), same vLLM and GPU:
#   ShareGPT, 1000 prompts at once: peak output throughput 8,890 tok/s; random 2K-token
#   prompts: 998,175 prompt tokens in 98.9 s (≈ 10.1k prompt tok/s, prefill-bound).
# [vllm-defaults] vLLM source, vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults:
#   on GPUs with ≥ 70 GiB that are not A100 (H100, H200, MI300x) the OpenAI server defaults to
#   max_num_seqs = 1024 and max_num_batched_tokens = 8192 (256 / 2048 on smaller GPUs).
# [qwen3-card] Qwen/Qwen3-8B model card (https://huggingface.co/Qwen/Qwen3-8B): context length
#   32,768 tokens natively.
QWEN3_8B_H100 = Profile(
    name="qwen3-8b-h100",
    models=("Qwen/Qwen3-8B",),
    # [vllm-defaults]. The KV cache, which can cap concurrency first, is not modelled.
    max_num_seqs=1024,
    # Estimate: [gpustack-14b]'s ≈ 10.1k prompt tok/s for 14.8B parameters, scaled by the
    # parameter ratio to 8.2B (≈ 18k) and rounded down for attention cost.
    prefill_tokens_per_s=16_000.0,
    # [gpustack-8b]: 1 / 7.28 ms.
    decode_tokens_per_s_batch1=137.0,
    # Estimate: fitted so the step-time model gives [gpustack-8b]'s BS=4 and BS=8 TPOT within
    # 2 % (7.53 and 7.84 ms), 9.5k tok/s at batch 256 and 11.9k at 1024, above the 8.9k peak
    # [gpustack-14b] measured for the larger Qwen3-14B.
    peak_decode_tokens_per_s=13_000.0,
    # Estimate: [gpustack-8b]'s 59 ms TTFT at BS=1 less the prefill of a ≈ 230-token prompt.
    request_overhead_s=0.045,
    # Estimate: median and spread chosen to give a mean near [gpustack-8b]'s ≈ 220 tokens per
    # ShareGPT answer with a long tail (lognormal mean = median · e^(σ²/2) ≈ 300).
    output_median_tokens=200,
    output_sigma=0.9,
    output_min_tokens=8,
    # Estimate: a natural end of answer; σ 0.9 puts 0.04 % of draws above it.
    output_max_tokens=4096,
    # [qwen3-card].
    max_model_len=32_768,
    # Estimate: Qwen2.5-VL makes one token per 28×28-pixel patch, ≈ 390 for a 640×480 frame.
    # Qwen3-8B itself is text-only; images are accepted so the critic's path can be exercised.
    image_tokens=400,
    # Estimate: the KV cache vLLM allocates at gpu_memory_utilization 0.9 (72 GB) less the
    # BF16 weights (16.4 GB) and activations (≈ 3 GB), at 144 KiB a token ([qwen3-card]'s 36
    # layers × 8 KV heads × 128 dims × K and V × 2 bytes): ≈ 360k tokens, rounded down.
    prefix_cache_tokens=300_000,
)

# A small, fast deployment for tests: four sequences at most, short answers.
TINY = Profile(
    name="tiny",
    models=("evobus-sim-tiny",),
    max_num_seqs=4,
    prefill_tokens_per_s=20_000.0,
    decode_tokens_per_s_batch1=200.0,
    peak_decode_tokens_per_s=800.0,
    request_overhead_s=0.0,
    output_median_tokens=16,
    output_sigma=0.5,
    output_min_tokens=4,
    output_max_tokens=256,
    max_model_len=8_192,
    image_tokens=64,
    prefix_cache_tokens=16_384,
)

_PROFILES = {profile.name: profile for profile in (QWEN3_8B_H100, TINY)}
DEFAULT_PROFILE = QWEN3_8B_H100.name


def list_profiles() -> list[Profile]:
    """Every built-in profile, the default first."""
    return list(_PROFILES.values())


def get_profile(name: str) -> Profile:
    """The built-in profile called ``name``.

    Raises:
        ValueError: no profile has that name (the message lists the known ones).
    """
    try:
        return _PROFILES[name]
    except KeyError:
        known = ", ".join(_PROFILES)
        raise ValueError(f"unknown llm-sim profile {name!r}; known profiles: {known}") from None
