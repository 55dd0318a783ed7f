"""Training and evaluation order.

Training (:func:`order_training`): with ``train.group_by_length`` the length-grouped permutation
of each epoch is drawn from the run's seed and the epoch number alone, so that ``nlptasks run
--resume`` in any epoch replays the batches of the uninterrupted run.  (transformers' own
``LengthGroupedSampler`` draws it from torch's global random state at the start of the epoch;
a resumed run restores that state only after the epoch's batches are drawn, so from the second
epoch on it trained on other batches than the run it continued.)

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

if TYPE_CHECKING:
    from nlptasks.context import RunContext

__all__ = ["example_lengths", "longest_first", "order_evaluation", "order_training", "restore", "tokens_in"]


def order_training(trainer: Any, ctx: RunContext) -> None:
    """With length-grouped training batches, make each epoch's permutation a function of the seed
    and the epoch (the Trainer calls ``set_epoch`` on its sampler before every epoch, resumed or
    not); other samplers are left as they are (accelerate already seeds the random one per epoch)."""
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

    original = trainer._get_train_sampler
    seed = ctx.recipe.seed

    class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
        """transformers' length grouping, with the permutation drawn from ``seed + epoch`` and the
        batches in random order.

        transformers sorts each mega-batch (up to 50 batches) longest first, so an epoch sweeps from
        long to short sentences several times: measured on SST-2 with MiniLM (3,000 rows, one epoch,
        three seeds) that cost 1.2 points of validation accuracy against random order.  Here the
        batches keep their members (the same padding) but follow each other in random order; the
        longest stays first, so that an out-of-memory error shows at the first step.
        """

        epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __iter__(self) -> Any:
            import torch

            generator = torch.Generator()
            generator.manual_seed(seed + self.epoch)
            indices = get_length_grouped_indices(self.lengths, self.batch_size, generator=generator)
            size = self.batch_size
            batches = [indices[i : i + size] for i in range(0, len(indices), size)]
            # a short last batch stays last: anywhere else it would shift every later batch's boundaries
            last = batches.pop() if len(batches) > 1 and len(batches[-1]) < size else []
            rest = batches[1:]
            order = torch.randperm(len(rest), generator=generator).tolist()
            return iter([*batches[0], *(i for j in order for i in rest[j]), *last])

    def sampler(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        if type(found) is LengthGroupedSampler:
            # the tokens of each example as the task preprocessed it (every input_ids column, every
            # axis), not transformers' len(input_ids), which counts a candidates axis
            dataset = args[0] if args else kwargs.get("train_dataset", trainer.train_dataset)
            own = trainer.args.length_column_name in (getattr(dataset, "column_names", None) or ())
            lengths = None if own else example_lengths(dataset)
            return EpochSeededLengthGroupedSampler(
                found.batch_size, lengths=[int(n) for n in lengths] if lengths is not None else found.lengths
            )
        return found

    trainer._get_train_sampler = sampler


def tokens_in(value: Any) -> int:
    """Tokens in one example's ``input_ids`` of any rank: its length, or the sum over its inner
    sequences (a multiple-choice example's candidates)."""
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        return sum(tokens_in(v) for v in value)
    return len(value)


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
    sequential."""
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
    if not sort:
        return

    def restored(prediction: Any) -> Any:
        order = current["order"]
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
        order = current["order"]
        if order is None:
            return output
        return output._replace(
            predictions=restore(output.predictions, order), label_ids=restore(output.label_ids, order)
        )

    trainer.evaluation_loop = evaluation_loop
