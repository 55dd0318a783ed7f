"""Training and evaluation order.

Training (:func:`order_training`): with ``train.group_by_length`` the length-grouped permutation
of each epoch is drawn from the run's seed and the epoch number alone, so that ``nlptasks run
--resume`` in any epoch replays the batches of the uninterrupted run.  (transformers' own
``LengthGroupedSampler`` draws it from torch's global random state at the start of the epoch;
a resumed run restores that state only after the epoch's batches are drawn, so from the second
epoch on it trained on other batches than the run it continued.)  For a task with one class per
row (``TaskSpec.stratify_by``: cls, pair classes) each grouped batch also keeps the data's mix of
classes (:func:`grouped_order`), where transformers' grouping makes batches of one class wherever a
class is shorter than another.

Evaluation and prediction (:func:`order_evaluation`): length-sorted batches, results in the
dataset's order.

Trainer evaluates in dataset order, padding each batch to its longest example; batches that mix a
short and a long example are mostly padding.  With ``train.sort_eval_by_length`` (the default) the
engine feeds evaluation and ``trainer.predict`` the examples longest first, so each batch holds
examples of similar length, and puts the predictions (and labels, inputs, losses) back in the
dataset's order before ``compute_metrics`` sees them and before ``predict`` returns them: tasks
that map predictions back by position (NER windows, pairs) see no difference.  The first batch is
the longest, so an evaluation that does not fit in memory fails at once.

Without sorting, evaluation is sequential in every case: transformers 5 otherwise length-groups
the evaluation sampler too when ``train_sampling_strategy = "group_by_length"``, without putting
the order back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nlptasks.engine.training.gathering import join_batches, pad_gathers

if TYPE_CHECKING:
    from nlptasks.context import RunContext

__all__ = [
    "example_classes",
    "example_lengths",
    "grouped_order",
    "longest_first",
    "order_evaluation",
    "order_training",
    "restore",
    "tokens_in",
]


def order_training(trainer: Any, ctx: RunContext) -> None:
    """With length-grouped training batches, make each epoch's batches a function of the seed and the
    epoch (the Trainer calls ``set_epoch`` on its sampler before every epoch, resumed or not) and, for
    tasks with one class per row (``TaskSpec.stratify_by``), give each batch the epoch's mix of classes
    (:func:`grouped_order`); other samplers are left as they are (accelerate already seeds the random
    one per epoch)."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    original = trainer._get_train_sampler
    seed = ctx.recipe.seed
    stratify = ctx.task.stratify_by
    by_class = stratify is not None and stratify(ctx.options) is not None

    class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
        """transformers' length grouping, with the permutation drawn from ``seed + epoch``, the
        batches in random order and, given ``classes``, each batch holding every class in the
        proportion the mega-batch has it (:func:`grouped_order`)."""

        epoch = 0

        def __init__(self, batch_size: int, *args: Any, classes: list[Any] | None = None, **kwargs: Any) -> None:
            super().__init__(batch_size, *args, **kwargs)
            self.classes = classes

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __iter__(self) -> Any:
            import math

            import torch

            # The Trainer's set_epoch does not reach a sampler under two wrappers: a resumed epoch
            # of a distributed run (accelerate's SkipBatchSampler around its BatchSamplerShard)
            # would replay epoch 0.  The epochs the Trainer has done (state.epoch: 1.47 when a run
            # resumes in its second epoch) tell it wherever the sampler sits.
            done = getattr(getattr(trainer, "state", None), "epoch", None) or 0.0
            epoch = max(self.epoch, math.floor(float(done) + 1e-6))
            generator = torch.Generator()
            generator.manual_seed(seed + epoch)
            return iter(grouped_order(self.lengths, self.batch_size, generator, self.classes))

    def sampler(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        if type(found) is LengthGroupedSampler:
            # the tokens of each example as the task preprocessed it (every input_ids column, every
            # axis), not transformers' len(input_ids), which counts a candidates axis
            dataset = args[0] if args else kwargs.get("train_dataset")
            dataset = trainer.train_dataset if dataset is None else dataset
            own = trainer.args.length_column_name in (getattr(dataset, "column_names", None) or ())
            lengths = None if own else example_lengths(dataset)
            classes = example_classes(dataset, found.batch_size) if by_class else None
            return EpochSeededLengthGroupedSampler(
                found.batch_size,
                lengths=[int(n) for n in lengths] if lengths is not None else found.lengths,
                classes=classes,
            )
        return found

    trainer._get_train_sampler = sampler


def tokens_in(value: Any) -> int:
    """Tokens in one example's ``input_ids`` of any rank: its length, or the sum over its inner
    sequences (a multiple-choice example's candidates)."""
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        return sum(tokens_in(v) for v in value)
    return len(value)


def grouped_order(lengths: Any, batch_size: int, generator: Any, classes: Any = None) -> list[int]:
    """One epoch of length-grouped training batches, as the flat list of example indices.

    transformers' grouping (``get_length_grouped_indices``): a random permutation cut into
    mega-batches of up to 50 batches, each sorted longest first, then cut into batches.  Its
    batches are strata of the data by length, so whatever goes with length goes with the batch:
    where a class is shorter than another (LCQMC's pairs under 18 characters are all negatives;
    ChnSentiCorp's positive reviews are shorter), whole batches come out of one class.

    Given ``classes`` (one per example), each mega-batch is instead ordered by an example's length
    *rank within its class* (its quantile, longest first), so the ``k``-th batch of a mega-batch
    takes the ``k``-th length slice of every class: each batch has the mega-batch's class mix (to
    within an example or two per class), its members of each class are of similar length, and the
    padding rises only by the length difference between classes.  Without ``classes`` (or with one class)
    the batches are transformers' own.

    Either way the batches then come in random order (transformers' long-to-short sweep through
    each mega-batch cost 1.2 points of SST-2 accuracy): the longest full batch first, so that an
    out-of-memory error shows at the first step, a short last batch last (anywhere else it would
    shift every later batch's boundaries).
    """
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    size = batch_size
    if classes is not None and len(set(classes)) > 1:
        indices = _class_balanced_indices(lengths, classes, size, generator)
    else:
        indices = get_length_grouped_indices(lengths, size, generator=generator)
    batches = [indices[i : i + size] for i in range(0, len(indices), size)]
    last = batches.pop() if len(batches) > 1 and len(batches[-1]) < size else []
    # transformers puts the longest example in the first batch; the class-balanced order may not
    longest = max(range(len(batches)), key=lambda b: max(lengths[i] for i in batches[b]))
    batches.insert(0, batches.pop(longest))
    rest = batches[1:]
    order = torch.randperm(len(rest), generator=generator).tolist()
    return [*batches[0], *(i for j in order for i in rest[j]), *last]


def _class_balanced_indices(lengths: Any, classes: Any, batch_size: int, generator: Any) -> list[int]:
    """transformers' permutation and mega-batches, each ordered by the length quantile of an example
    within its class (ties keep the permutation's order)."""
    import torch

    n = len(lengths)
    mega = max(1, min(n // (batch_size * 4), 50)) * batch_size  # transformers' mega-batch size
    permutation = torch.randperm(n, generator=generator).tolist()
    out: list[int] = []
    for start in range(0, n, mega):
        members = permutation[start : start + mega]
        by_class: dict[Any, list[int]] = {}
        for i in members:
            by_class.setdefault(classes[i], []).append(i)
        quantile: dict[int, float] = {}
        for group in by_class.values():
            group.sort(key=lambda i: lengths[i], reverse=True)
            for rank, i in enumerate(group):
                quantile[i] = (rank + 0.5) / len(group)
        out.extend(sorted(members, key=quantile.__getitem__))
    return out


def example_classes(dataset: Any, batch_size: int) -> list[Any] | None:
    """The class of each training example (the ``labels`` column) where every row has one class
    (a scalar) and there are from 2 to ``batch_size`` classes (more cannot all be in each batch);
    else ``None``."""
    names = getattr(dataset, "column_names", None)
    if not names or "labels" not in names:
        return None
    values = list(dataset.with_format(None)["labels"])
    if not values or not all(isinstance(v, (int, float, str)) for v in values):
        return None
    return values if 2 <= len(set(values)) <= batch_size else None


def example_lengths(dataset: Any) -> Any:
    """Tokens per example (``input_ids`` and any ``*input_ids`` column summed, every axis counted),
    or ``None`` when the dataset has no such column or no length (an iterable dataset)."""
    import numpy as np

    names = getattr(dataset, "column_names", None)
    if not names:
        return None
    columns = [c for c in names if c.endswith("input_ids")]
    if not columns:
        return None
    plain = dataset.with_format(None)
    lengths = np.zeros(len(dataset), dtype=np.int64)
    for column in columns:
        lengths += np.fromiter((tokens_in(x) for x in plain[column]), dtype=np.int64, count=len(dataset))
    return lengths


def longest_first(lengths: Any) -> Any:
    """Indices by length, longest first; ties keep the dataset order."""
    import numpy as np

    return np.argsort(-np.asarray(lengths), kind="stable")


def restore(value: Any, order: Any) -> Any:
    """``value`` given in ``order`` (row ``k`` is dataset row ``order[k]``) put back in dataset
    order; tuples, lists and dicts of arrays are restored element by element, anything whose
    first dimension is not the number of rows is returned as it is."""
    import numpy as np

    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return type(value)(restore(v, order) for v in value)
    if isinstance(value, dict):
        return {k: restore(v, order) for k, v in value.items()}
    if getattr(value, "ndim", 0) >= 1 and len(value) == len(order):
        out = np.empty_like(value)
        out[order] = value
        return out
    return value


def order_evaluation(trainer: Any, ctx: RunContext) -> None:
    """Install the evaluation order on ``trainer`` (whatever its class): length-sorted with the
    order restored when ``train.sort_eval_by_length`` is on and padding is dynamic, else
    sequential; and the batches' outputs joined with every axis padded (:mod:`.gathering`)."""
    from torch.utils.data import Sampler, SequentialSampler
    from transformers import EvalPrediction

    train = ctx.recipe.train
    sort = train.sort_eval_by_length and train.padding == "dynamic"
    current: dict[str, Any] = {"order": None}
    cache: dict[Any, Any] = {}

    class InOrder(Sampler):
        def __init__(self, order: Any) -> None:
            self.order = order

        def __iter__(self) -> Any:
            return iter(self.order.tolist())

        def __len__(self) -> int:
            return len(self.order)

    def sorted_order(dataset: Any) -> Any:
        key = getattr(dataset, "_fingerprint", None) or id(dataset)
        if key not in cache:
            lengths = example_lengths(dataset)
            cache[key] = None if lengths is None else longest_first(lengths)
        return cache[key]

    def eval_sampler(dataset: Any) -> Any:
        if dataset is None or not hasattr(dataset, "__len__"):
            current["order"] = None
            return None
        current["order"] = sorted_order(dataset) if sort else None
        if current["order"] is None:  # in order; several processes: accelerate shards it in order
            return SequentialSampler(dataset) if trainer.args.world_size <= 1 else None
        return InOrder(current["order"])

    trainer._get_eval_sampler = eval_sampler
    # batches as they are, joined with every axis padded (gathering.py), unless the recipe asked
    join = "eval_do_concat_batches" not in train.extra and not trainer.args.batch_eval_metrics
    if join:
        trainer.args.eval_do_concat_batches = False
    pad_gathers(trainer)
    if not sort and not join:
        return

    def restored(prediction: Any) -> Any:
        order = current["order"]
        if join:
            prediction = EvalPrediction(
                predictions=join_batches(prediction.predictions),
                label_ids=join_batches(prediction.label_ids),
                inputs=join_batches(prediction.inputs),
                losses=join_batches(prediction.losses),
            )
        if order is None:
            return prediction
        return EvalPrediction(
            predictions=restore(prediction.predictions, order),
            label_ids=restore(prediction.label_ids, order),
            inputs=restore(prediction.inputs, order),
            losses=restore(prediction.losses, order),
        )

    class Metrics:
        """``trainer.compute_metrics`` seen in dataset order (a plugin may swap it out and back)."""

        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def __call__(self, prediction: Any, *args: Any, **kwargs: Any) -> Any:
            if trainer.args.batch_eval_metrics:  # per batch: order does not matter to an accumulator
                return self.fn(prediction, *args, **kwargs)
            return self.fn(restored(prediction), *args, **kwargs)

    if trainer.compute_metrics is not None:
        trainer.compute_metrics = Metrics(trainer.compute_metrics)
    original_loop = trainer.evaluation_loop

    def evaluation_loop(*args: Any, **kwargs: Any) -> Any:
        output = original_loop(*args, **kwargs)
        if join:
            output = output._replace(
                predictions=join_batches(output.predictions), label_ids=join_batches(output.label_ids)
            )
        order = current["order"]
        if order is None:
            return output
        return output._replace(
            predictions=restore(output.predictions, order), label_ids=restore(output.label_ids, order)
        )

    trainer.evaluation_loop = evaluation_loop
