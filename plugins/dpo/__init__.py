"""``dpo``: preference tuning (Direct Preference Optimization) of a chat model, trained by TRL.

A ``dpo`` run starts from an ``sft`` run (``model.name_or_path = "runs/sft/<run>"``: its base and
adapter merged, its chat template, stop tokens and system prompt) or from any causal LM, and
teaches it to prefer the ``chosen`` answer of each pair over the ``rejected`` one.  TRL's
``DPOTrainer`` does the training (``trainer.py``); the engine gives it what every task gets:
recipe validation (``options.beta``, ``options.loss_type``...), row-named data errors, resume,
``tune``, ``compare``, ``eval``, reports, and chat at inference (the sft predictor).

The reference model is the starting model: with an adapter (``[peft]``), the same model with the
adapter switched off; without one, a second copy of the start.

Data (``data.py``): TRL's conversational pairs, plain text pairs, or LLaMA-Factory's ShareGPT
pairs, from jsonl/json files or a hub dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.plugin import (
    LoadOptions,
    Problem,
    RecipeError,
    RunContext,
    TaskSpec,
    Usage,
    hookimpl,
    load_model,
)

from .start import load_start, reference_of_run
from .trainer import PAIR_METRICS

LossType = Literal[
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
]


class DpoOptions(BaseModel):
    """Options of the ``dpo`` task (the recipe's ``[options]`` table)."""

    model_config = ConfigDict(extra="forbid")

    shape: Literal["auto", "conversational", "text", "sharegpt"] = Field(
        "auto",
        description="Row shape: 'conversational' (prompt turns, chosen/rejected assistant turns), 'text' (three "
        "strings), 'sharegpt' (LLaMA-Factory's conversations/chosen/rejected), or 'auto' (by the columns).",
    )
    prompt_column: str = Field("prompt", description="The prompt: a list of {role, content} turns, or a text.")
    chosen_column: str = Field("chosen", description="The preferred answer.")
    rejected_column: str = Field("rejected", description="The answer to prefer less.")
    conversations_column: str = Field("conversations", description="ShareGPT shape: the prompt's {from, value} turns.")
    beta: float = Field(
        0.1,
        gt=0,
        le=100,
        description="How far the model may move from the reference: the KL weight of DPO (higher: closer to "
        "the reference).  TRL's default, 0.1.",
    )
    loss_type: LossType | list[LossType] = Field(
        "sigmoid",
        description="TRL's DPO loss: 'sigmoid' (DPO), 'ipo', 'hinge', 'robust', ... or a list combined with "
        "options.loss_weights (e.g. ['sigmoid', 'sft'] adds the chosen answers' language-model loss).",
    )
    loss_weights: list[Annotated[float, Field(ge=0, le=1000)]] | None = Field(
        None, description="Weights of the loss types of a list (default: 1 each); as many as loss types."
    )
    label_smoothing: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="Share of pairs assumed mislabelled ('robust', 'exo_pair', cDPO with 'sigmoid'); 'exo_pair' "
        "needs more than 0.",
    )
    precompute_reference: bool = Field(
        True,
        description="Score every pair with the reference once before training (one forward pass over the data) "
        "instead of at every step: faster from the second epoch on; false: the reference runs beside each step.",
    )
    template: Literal["auto", "chatml", "alpaca", "tokenizer"] = Field(
        "auto",
        description="Chat template, stored with the run: 'auto' (the starting sft run's, else the tokenizer's own, "
        "else alpaca), 'chatml', 'alpaca', or 'tokenizer' (the tokenizer's own).",
    )
    system: str | None = Field(
        None,
        description="System prompt added to prompts without one (stored; used at inference too).  Default: the "
        "starting sft run's.",
    )
    no_response: Literal["error", "drop"] = Field(
        "error",
        description="A pair whose prompt alone fills model.max_length (no answer token left to compare): stop "
        "with an error naming the row, or drop it (counted).",
    )
    bad_rows: Literal["error", "skip"] = Field(
        "error", description="A malformed row: stop with an error naming the file and row, or skip it (counted)."
    )


def _loss_types(options: DpoOptions) -> list[str]:
    return [options.loss_type] if isinstance(options.loss_type, str) else list(options.loss_type)


@hookimpl
def register_tasks(register: Any) -> None:
    register(
        TaskSpec(
            name="dpo",
            description="Preference tuning of a chat model (DPO, trained by TRL) on chosen/rejected answer pairs.",
            options=DpoOptions,
            best_metric="loss",
            greater_is_better=False,
            peft_task_type="CAUSAL_LM",
            metrics=_metrics,
            usage=_usage,
            recipe_problems=_recipe_problems,
        )
    )


def _metrics(options: DpoOptions) -> tuple[str, ...]:
    """the pair figures of trainer.py, computed over every validation pair"""
    return PAIR_METRICS


def _usage(manifest: dict[str, Any]) -> Usage:
    return Usage(example=(manifest.get("example") or "your prompt",), labels="- (generates text)")


def _recipe_problems(recipe: Any, options: DpoOptions) -> list[tuple[str, str]]:
    """A from-scratch model (DPO refines a model that already answers); loss settings TRL would
    refuse only once training starts."""
    problems = []
    if recipe.model.scratch is not None:
        problems.append(
            (
                "model.scratch",
                "dpo refines a model that already answers; a random one has no preferences to shift. Train one "
                'first (nlptasks run recipes/sft.toml) and start from it: model.name_or_path = "runs/sft/<run>"',
            )
        )
    types = _loss_types(options)
    if options.loss_weights is not None and len(options.loss_weights) != len(types):
        problems.append(
            (
                "options.loss_weights",
                f"{len(options.loss_weights)} weight(s) for {len(types)} loss type(s) ({', '.join(types)}): give one "
                "weight per loss type, or leave it out (1 each)",
            )
        )
    if len(set(types)) != len(types):
        problems.append(("options.loss_type", f"names a loss type twice: {', '.join(types)}"))
    if "exo_pair" in types and options.label_smoothing == 0:
        problems.append(
            (
                "options.label_smoothing",
                "'exo_pair' needs label_smoothing > 0 (the EXO paper uses 0.001): --set options.label_smoothing=0.001",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------------
# Step 4: pairs → prompt_ids, chosen_ids, rejected_ids
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_setup(ctx: RunContext) -> None:
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        raise RecipeError(
            "recipe",
            [Problem("task", "'dpo' is trained by TRL, which is not installed: pip install 'nlptasks[dpo]'")],
        )
    ctx.skip_malformed_rows = ctx.options.bad_rows == "skip"
    if ctx.trained_run is None:
        _refuse_a_start_that_cannot_generate(ctx.recipe.model.name_or_path)


def _refuse_a_start_that_cannot_generate(name: str | None) -> None:
    """A start model whose ``config.json`` names no causal-LM class (an encoder: MiniLM's
    ``BertModel``, an mlm run's ``BertForMaskedLM``) cannot generate, so DPO has nothing to tune;
    said at its key, before the template is blamed for the tokenizer's missing eos token."""
    import json
    from pathlib import Path

    config = Path(name) / "config.json" if name else None
    if config is None or not config.is_file() or (config.parent / "nlptasks.json").is_file():
        return  # a hub id (read when it loads), a folder the loader will name, or a run (load_start names its task)
    try:
        values = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the loader says what is wrong with it
    architectures = [str(a) for a in values.get("architectures") or []]
    causal = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures) and (
        values.get("is_decoder", True) or not any(a.startswith(("Bert", "Roberta")) for a in architectures)
    )
    if architectures and not causal:
        raise RecipeError(
            "recipe",
            [
                Problem(
                    "model.name_or_path",
                    f"{name} is a {', '.join(architectures)}, not a causal language model: it cannot generate "
                    "answers, so DPO has nothing to tune",
                )
            ],
            hint="Start from an sft run (nlptasks run recipes/sft.toml --set output.run_name=quickstart) or any "
            "causal LM (a decoder such as Qwen2 or GPT-2).",
        )


@hookimpl
def nlptasks_preprocess(ctx: RunContext, data: Any) -> Any:
    from .pairs import tokenize_pairs

    return tokenize_pairs(ctx, data)


@hookimpl
def nlptasks_check(ctx: RunContext, data: Any) -> list[Any]:
    """The data doctor: malformed pairs (every one, with its reason) and pairs repeated exactly
    (prompt and both answers: a repeated pair weighs twice)."""
    from .pairs import check_pairs

    return check_pairs(ctx, data)


# ---------------------------------------------------------------------------------------------
# Steps 5 to 8: the model, TRL's config, collator and trainer
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_build_model(ctx: RunContext) -> Any:
    model = load_start(ctx) if ctx.trained_run is None else load_model(ctx, "AutoModelForCausalLM")
    tokenizer = ctx.tokenizer
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))  # the template added end-of-turn tokens
    model.generation_config.eos_token_id = ctx.state["stop_ids"]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if getattr(model.config, "use_cache", None) is not None:
        model.config.use_cache = False
    return model


@hookimpl
def nlptasks_training_arguments(ctx: RunContext, kwargs: dict[str, Any]) -> Any:
    import dataclasses

    from trl import DPOConfig

    opts: DpoOptions = ctx.options
    known = {f.name for f in dataclasses.fields(DPOConfig)}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise RecipeError("recipe", [Problem(f"train.extra.{k}", "not a TRL DPOConfig field") for k in unknown])
    return DPOConfig(
        **{"gradient_checkpointing": False, **kwargs},  # TRL turns it on by default: slower, and not asked for
        beta=opts.beta,
        loss_type=_loss_types(opts),
        loss_weights=opts.loss_weights,
        label_smoothing=opts.label_smoothing,
        # nlptasks eval: a trained adapter's reference is the base, known only once TRL's own copy is gone
        precompute_ref_log_probs=opts.precompute_reference and ctx.trained_run is None,
        max_length=None,  # step 4 fitted every pair into model.max_length (and counted the cuts)
    )


@hookimpl
def nlptasks_data_collator(ctx: RunContext) -> Any:
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    return DataCollatorForPreference(pad_token_id=ctx.tokenizer.pad_token_id)


@hookimpl
def nlptasks_trainer(
    ctx: RunContext, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
) -> Any:
    from .trainer import dpo_trainer_class

    reference = None
    if not hasattr(model, "peft_config"):  # full fine-tuning: a frozen copy of the start
        if ctx.trained_run is None:
            reference = load_start(ctx)
        else:
            reference = reference_of_run(ctx)
    train = data["train"] if "train" in data else next(iter(data.values()))  # nlptasks eval: never trained
    trainer = dpo_trainer_class()(
        model=model,
        ref_model=reference,
        args=args,
        data_collator=data_collator,
        train_dataset=train,
        eval_dataset=data["validation"] if "validation" in data else None,
        processing_class=ctx.tokenizer,
    )
    ctx.state["trainer"] = trainer
    if trainer.reference_seconds and ctx.trained_run is None:  # not in the Trainer's runtime: said beside it
        ctx.record("train", "reference_seconds", round(trainer.reference_seconds, 3))
    return trainer


# ---------------------------------------------------------------------------------------------
# Step 9, eval errors and the card
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_errors(ctx: RunContext, split: str, evaluation: Any) -> list[dict[str, Any]] | None:
    """Every pair whose chosen answer does not get the higher reward, the worst margin first."""
    trainer, pairs = ctx.state.get("trainer"), ctx.state.get("pairs", {}).get(split)
    scores = getattr(trainer, "last_scores", {}).get(split) if trainer is not None else None
    if not scores or not pairs:
        return None
    beta = trainer.beta
    out = []
    for (row, prompt, chosen, rejected), c, r, rc, rr in zip(
        pairs, scores["chosen"], scores["rejected"], scores["ref_chosen"], scores["ref_rejected"], strict=True
    ):
        margin = beta * (c - rc) - beta * (r - rr)
        if margin <= 0:
            out.append(
                {
                    "row": row,
                    "prompt": prompt[-1]["content"],
                    "chosen": chosen,
                    "rejected": rejected,
                    "chosen_reward": round(beta * (c - rc), 6),
                    "rejected_reward": round(beta * (r - rr), 6),
                    "margin": round(margin, 6),
                }
            )
    return sorted(out, key=lambda e: e["margin"])


@hookimpl
def nlptasks_report(ctx: RunContext, trainer: Any, data: Any, metrics: dict[str, Any]) -> list[str]:
    opts: DpoOptions = ctx.options
    lines = [
        "## Preferences",
        "",
        f"DPO (TRL {_trl_version()}), loss {' + '.join(_loss_types(opts))}, beta {opts.beta}, reference: "
        + ("the start with the adapter off" if hasattr(trainer.model, "peft_config") else "a frozen copy of the start")
        + f" ({ctx.recipe.model.name_or_path}).",
        "",
        "| split | pairs | ranked right before | ranked right after | reward accuracy | reward margin |",
        "|---|---|---|---|---|---|",
    ]
    for split in ("validation", "test"):
        m = metrics.get(split)
        if not m:
            continue
        lines.append(
            f"| {split} | {len(data[split])} | {_fmt(m.get('start_preference_accuracy'))} | "
            f"{_fmt(m.get('preference_accuracy'))} | {_fmt(m.get('reward_accuracy'))} | {_fmt(m.get('reward_margin'))} |"
        )
    lines += [
        "",
        "*Ranked right*: the model gives the chosen answer a higher log-probability than the rejected one. *Reward*: "
        "beta x (log-probability under the model - under the reference); 0 for every pair before training.",
    ]
    return ["\n".join(lines)]


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}"


def _trl_version() -> str:
    import trl

    return str(trl.__version__)


# ---------------------------------------------------------------------------------------------
# Step 10: chat, as for sft
# ---------------------------------------------------------------------------------------------


@hookimpl
def nlptasks_load_predictor(run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> Any:
    if manifest.get("task") != "dpo":
        return None
    from nlptasks_plugins.sft.predict import SftPredictor

    # the sft predictor reads sft options: a dpo run's prompts are chat turns or plain text
    return SftPredictor(run_dir, {**manifest, "options": {"system": manifest.get("system")}}, options)
