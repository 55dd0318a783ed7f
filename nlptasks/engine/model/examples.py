"""A few of the task's own preprocessed examples, kept in every run folder (``examples.json``), as
the model takes them: what the engine features that need model inputs use instead of guessing
their shape (a candidates axis, two encoded sides, an extra input of the task's own).

* the PEFT input probe (:func:`nlptasks.engine.model.peft.pass_every_input`), at training and when
  an adapter run is loaded;
* ``nlptasks export --merge``'s check that the merged model predicts as the adapter did;
* ``nlptasks export --onnx``: the example inputs traced, the graph's input names and dynamic axes,
  and the shapes the graph is checked at.

Each stored example is one model call's inputs for one example: every column of step 4's data
whose name the model's forward takes (``input_ids``, ``attention_mask``, ``token_type_ids``, or a
task's own), label fields left out, values as nested lists of any rank; for an encoder-decoder
whose data holds only its target (a ``target`` label field), the decoder's inputs made from it.  A task whose data encodes
two sides apart (``input_ids_a``, ``input_ids_b``: a bi-encoder) gives one example per side, under
the model's own names.  Runs made before this file existed have ``peft_check.json`` (adapter runs)
in the same form.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nlptasks.engine.model.introspect import accepted_inputs

__all__ = [
    "EXAMPLES_FILE",
    "LEGACY_FILE",
    "example_rows",
    "pad_batch",
    "probe_batch",
    "read_examples",
    "write_examples",
]

EXAMPLES_FILE = "examples.json"
LEGACY_FILE = "peft_check.json"
ROWS = 8


def _plain(value: Any) -> Any:
    """Nested lists of Python numbers (from tensors, NumPy arrays or lists)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool):
        return int(value)
    return value


def example_rows(
    data: Any, model: Any, label_fields: Any = (), rows: int = ROWS, collator: Any = None
) -> dict[str, Any]:
    """``{"split", "inputs"}``: up to ``rows`` examples of validation (else train) as model calls
    (see the module docstring).  A task whose step 4 columns are not the model's inputs (``dpo``:
    ``prompt_ids``, ``chosen_ids``, ``rejected_ids``, which its collator joins into two sequences)
    is read through its ``collator``: each example collated alone, every row of that batch one
    model call."""
    split = "validation" if "validation" in data and len(data["validation"]) else "train"
    ds = data[split]
    columns = set(ds.column_names)
    takes = (
        accepted_inputs(model)
        - set(label_fields)
        - {"labels", "return_dict", "output_attentions", "output_hidden_states", "kwargs", "args"}
    )
    suffixes = sorted({c[len("input_ids") :] for c in columns if c.startswith("input_ids")})
    inputs = []
    for suffix in suffixes:
        names = [n for n in sorted(takes) if n + suffix in columns]
        if "input_ids" not in names:
            continue
        for i in range(min(rows, len(ds))):
            row = ds[i]
            made = {n: _plain(row[n + suffix]) for n in names}
            if not suffix and "decoder_input_ids" in takes and "decoder_input_ids" not in columns:
                made.update(_decoder_inputs(model, row, label_fields))
            inputs.append(made)
    if not inputs and collator is not None:
        inputs = _collated(ds, collator, takes, rows)
    return {"split": split, "inputs": inputs}


def _collated(ds: Any, collator: Any, takes: set[str], rows: int) -> list[dict[str, Any]]:
    """Examples made by the task's collator, one model call per row of each one-example batch;
    ``[]`` when the collator gives no ``input_ids`` the model takes, or fails on a lone example."""
    inputs = []
    for i in range(min(rows, len(ds))):
        example = {k: v for k, v in ds[i].items() if not k.startswith("__")}  # the engine's own columns
        try:
            batch = collator([example])
        except Exception:  # noqa: BLE001 - a collator that needs company: no stored examples, as before
            return []
        names = [n for n in batch if n in takes]
        if "input_ids" not in names:
            return []
        inputs += [{n: _plain(batch[n][j]) for n in names} for j in range(len(batch["input_ids"]))]
    return inputs


def _decoder_inputs(model: Any, row: dict[str, Any], label_fields: Any) -> dict[str, Any]:
    """An encoder-decoder's decoder side of one example when the task's data has only the target
    (a label field of kind ``target``): ``decoder_input_ids`` as the model makes them from its
    labels in training (shifted right, ``-100`` as padding); ``{}`` for any other model."""
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False) or not isinstance(label_fields, dict):
        return {}
    target = next((c for c, kind in label_fields.items() if kind == "target" and c in row), None)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    prepare = getattr(base, "prepare_decoder_input_ids_from_labels", None)
    if target is None or prepare is None:
        return {}
    import torch

    return {"decoder_input_ids": _plain(prepare(labels=torch.tensor([row[target]]))[0])}


def write_examples(path: Path, data: Any, model: Any, label_fields: Any = (), collator: Any = None) -> int:
    """Store :func:`example_rows` as JSON at ``path``; the number of examples stored."""
    found = example_rows(data, model, label_fields, collator=collator)
    path.write_text(json.dumps(found) + "\n", encoding="utf-8")
    return len(found["inputs"])


def read_examples(run_dir: Path, name: str | None = None) -> list[dict[str, Any]]:
    """The stored examples of a run folder (``examples.json``, else an older run's
    ``peft_check.json``; ``name`` another file of the folder); ``[]`` when it has none."""
    for file in [name] if name else [EXAMPLES_FILE, LEGACY_FILE]:
        path = Path(run_dir) / file
        if path.exists():
            try:
                return list(json.loads(path.read_text(encoding="utf-8")).get("inputs") or [])
            except (OSError, ValueError, AttributeError):
                return []
    return []


def _depth(value: Any) -> int:
    return 1 + _depth(value[0]) if isinstance(value, list) and value else 1 if isinstance(value, list) else 0


def _shape(value: Any) -> tuple[int, ...]:
    """The sizes of every axis but the last (the sequence, which padding evens out)."""
    shape = []
    while isinstance(value, list) and value and isinstance(value[0], list):
        shape.append(len(value))
        value = value[0]
    return tuple(shape)


def pad_batch(examples: list[dict[str, Any]], pad_id: int = 0, length: int | None = None) -> dict[str, Any] | None:
    """One batch (torch tensors, batch axis first) of ``examples`` padded along their last axis to
    the longest (or to ``length``): ``pad_id`` for ``*input_ids``, 0 for every other input (the
    attention mask then hides the padding).  ``None`` when the examples cannot share a batch (other
    inputs, or sizes of the other axes that differ)."""
    import torch

    if not examples or len({tuple(sorted(e)) for e in examples}) != 1:
        return None
    names = list(examples[0])
    if len({_shape(e[n]) for e in examples for n in names if _depth(e[n]) >= 2} | set()) > 1:
        return None

    def longest(value: Any) -> int:
        if isinstance(value, list) and value and isinstance(value[0], list):
            return max(longest(v) for v in value)
        return len(value) if isinstance(value, list) else 0

    target = max(longest(e[n]) for e in examples for n in names)
    if length is not None:
        target = max(target, length)

    def padded(value: Any, fill: int) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], list):
            return [padded(v, fill) for v in value]
        return list(value) + [fill] * (target - len(value))

    batch = {}
    for name in names:
        fill = pad_id if name.endswith("input_ids") else 0
        batch[name] = torch.tensor([padded(e[name], fill) for e in examples])
    return batch


def probe_batch(examples: list[dict[str, Any]], device: Any = None) -> dict[str, Any] | None:
    """The first stored example as a batch of one (no padding), on ``device``; ``None`` without one."""
    if not examples:
        return None
    batch = pad_batch(examples[:1])
    if batch is None:
        return None
    return {k: v.to(device) for k, v in batch.items()} if device is not None else batch
