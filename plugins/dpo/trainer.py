"""TRL's ``DPOTrainer`` as our step 8b, and the exact per-pair figures of a split.

TRL trains; this module adapts it to the engine's contract:

* the splits arrive tokenized by step 4 (``prompt_ids``, ``chosen_ids``, ``rejected_ids``, rows
  counted and named there), so TRL's own tokenization is skipped for them;
* with an adapter, the reference is the model with the adapter switched off (TRL's frozen "ref"
  copy of a new adapter is the same model, and would be the *trained* adapter when a finished run
  is evaluated, so it is removed);
* ``evaluate`` adds figures computed pair by pair over the whole split (TRL logs batch means):
  ``reward_accuracy`` (share of pairs whose implicit reward β·(log π − log π_ref) is higher for
  the chosen answer), ``reward_margin`` (mean chosen − rejected reward), ``chosen_reward``,
  ``rejected_reward``, and ``preference_accuracy`` (share of pairs the model itself ranks right:
  the chosen answer's mean log-probability per token above the rejected one's; measurable before
  training, where every reward is 0.  Per token, because a sum ranks a longer chosen answer below
  a shorter rejected one even when each of its tokens is likelier), and
  ``start_preference_accuracy``, the same under the reference: the starting model's ranking, the
  figure DPO moves (the reference *is* the start, so every evaluation has it, ``eval`` too).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PAIR_METRICS", "dpo_trainer_class", "pair_figures", "score_pairs"]

PAIR_METRICS = (
    "reward_accuracy",
    "reward_margin",
    "chosen_reward",
    "rejected_reward",
    "preference_accuracy",
    "start_preference_accuracy",
)


def score_pairs(trainer: Any, dataset: Any) -> dict[str, list[float]]:
    """Per pair, in the dataset's order: the policy's and the reference's summed log-probabilities
    of the chosen and the rejected answer (``chosen``, ``rejected``, ``ref_chosen``, ``ref_rejected``)
    and the answers' lengths in tokens (``chosen_tokens``, ``rejected_tokens``)."""
    import torch

    model = trainer.model
    was_training = model.training
    model.eval()
    loader = trainer.get_eval_dataloader(dataset)
    out: dict[str, list[float]] = {
        "chosen": [],
        "rejected": [],
        "ref_chosen": [],
        "ref_rejected": [],
        "chosen_tokens": [],
        "rejected_tokens": [],
    }
    try:
        for batch in loader:
            batch = trainer._prepare_inputs(batch)
            mask = batch["completion_mask"]
            labels = batch["input_ids"].masked_fill(mask == 0, -100)
            with torch.no_grad(), trainer.compute_loss_context_manager():
                outputs = model(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    labels=labels,
                    use_cache=False,
                    fused_lm_head=True,
                )
                logps = outputs.log_probs[:, -(mask.size(1) - 1) :].sum(dim=1)
                chosen, rejected = logps.chunk(2, dim=0)
                if "ref_chosen_logps" in batch:
                    ref_chosen, ref_rejected = batch["ref_chosen_logps"], batch["ref_rejected_logps"]
                else:
                    reference = trainer.ref_model if trainer.ref_model is not None else model
                    ref_chosen, ref_rejected = trainer.compute_ref_log_probs(reference, batch)
            chosen_tokens, rejected_tokens = mask.sum(dim=1).chunk(2, dim=0)
            for key, value in (
                ("chosen_tokens", chosen_tokens),
                ("rejected_tokens", rejected_tokens),
                ("chosen", chosen),
                ("rejected", rejected),
                ("ref_chosen", ref_chosen),
                ("ref_rejected", ref_rejected),
            ):
                out[key] += trainer.accelerator.gather_for_metrics(value.float()).tolist()
    finally:
        model.train(was_training)
    return out


def pair_figures(scores: dict[str, list[float]], beta: float) -> dict[str, float]:
    """The split's figures (:data:`PAIR_METRICS`, and ``pairs``: how many were scored) from
    :func:`score_pairs`."""
    n = len(scores["chosen"])
    if not n:
        return {}
    chosen = [beta * (p - r) for p, r in zip(scores["chosen"], scores["ref_chosen"], strict=True)]
    rejected = [beta * (p - r) for p, r in zip(scores["rejected"], scores["ref_rejected"], strict=True)]
    return {
        "pairs": n,
        "reward_accuracy": sum(c > r for c, r in zip(chosen, rejected, strict=True)) / n,
        "reward_margin": sum(c - r for c, r in zip(chosen, rejected, strict=True)) / n,
        "chosen_reward": sum(chosen) / n,
        "rejected_reward": sum(rejected) / n,
        "preference_accuracy": _ranked_right(scores, ""),
        "start_preference_accuracy": _ranked_right(scores, "ref_"),
    }


def _ranked_right(scores: dict[str, list[float]], model: str) -> float:
    """Share of pairs whose chosen answer has the higher mean log-probability per token under the
    policy (``model=""``) or the reference (``"ref_"``)."""
    right = sum(
        c / max(nc, 1) > r / max(nr, 1)
        for c, r, nc, nr in zip(
            scores[f"{model}chosen"],
            scores[f"{model}rejected"],
            scores["chosen_tokens"],
            scores["rejected_tokens"],
            strict=True,
        )
    )
    return right / len(scores["chosen"])


def dpo_trainer_class() -> Any:
    """``trl.DPOTrainer`` adapted to the engine (defined on call: trl is imported by step 8 only)."""
    from trl import DPOTrainer

    class NlptasksDPOTrainer(DPOTrainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.reference_seconds = 0.0  # options.precompute_reference: the pass before training
            super().__init__(*args, **kwargs)
            if "ref" in getattr(self.model, "peft_config", {}):  # see the module docstring
                self.model.delete_adapter("ref")
                self.model.set_adapter("default")
            self.last_scores: dict[str, dict[str, list[float]]] = {}
            self.trl_names: set[str] = set()

        def _precompute_ref_logps(self, dataset: Any, name: str, batch_size: int) -> Any:
            """TRL's reference pass, with the result kept in memory: TRL writes it to a cache file
            beside the dataset, which for our in-memory splits is a temporary folder of one process,
            so with --nproc the other ranks found no file."""
            import time

            import torch
            from datasets import Value
            from torch.utils.data import DataLoader

            started = time.perf_counter()
            loader = self.accelerator.prepare(
                DataLoader(dataset, batch_size=batch_size, collate_fn=self.data_collator, shuffle=False)
            )
            model = self.ref_model or self.model
            if self.ref_model is None and self.is_deepspeed_enabled:
                # before training prepares the model, DeepSpeed's weights are not placed (ZeRO-1/2) or
                # sharded (ZeRO-3): an inference engine places and gathers them, as TRL's own pass does
                from trl.models import prepare_deepspeed

                if getattr(self, "_precompute_engine", None) is None:
                    self._precompute_engine = prepare_deepspeed(self.model, self.accelerator)
                model = self._precompute_engine
            chosen, rejected = [], []
            for batch in loader:
                c, r = self.compute_ref_log_probs(model, batch)
                c, r = self.accelerator.gather_for_metrics((c, r))  # every rank gets every pair, in order
                chosen.append(c.float().cpu())
                rejected.append(r.float().cpu())
            as_float = Value("float32")  # as TRL's cached column
            dataset = dataset.add_column("ref_chosen_logps", torch.cat(chosen).numpy(), feature=as_float)
            dataset = dataset.add_column("ref_rejected_logps", torch.cat(rejected).numpy(), feature=as_float)
            self.reference_seconds += time.perf_counter() - started
            return dataset

        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
            if "prompt_ids" in getattr(dataset, "column_names", ()):
                return dataset  # tokenized by step 4
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            mode = "train" if self.model.training else "eval"
            self.trl_names = set(self._metrics[mode])  # what TRL's log adds to these logs
            super().log(logs, start_time)

        def evaluate(
            self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval"
        ) -> dict[str, float]:
            dataset = self.eval_dataset if eval_dataset is None else eval_dataset
            self.trl_names = set()
            metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
            # TRL's batch means stay in the training log; the returned figures are the Trainer's and ours
            added = {f"{p}_{name}" for name in self.trl_names for p in ("eval", metric_key_prefix)}
            metrics = {k: v for k, v in metrics.items() if k not in added}
            scores = score_pairs(self, dataset)
            self.last_scores[metric_key_prefix] = scores
            figures = {f"{metric_key_prefix}_{k}": v for k, v in pair_figures(scores, self.beta).items()}
            metrics.update(figures)
            self.log(dict(figures))
            return metrics

    return NlptasksDPOTrainer
