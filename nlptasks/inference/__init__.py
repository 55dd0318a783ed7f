"""The inference floor: step 10 and everything built on trained runs.

Above the engine and the plugin host, below the public plugin API, the pipeline and the commands:

``backends``       the backend table (torch, onnx, and those plugins register) and the choice of
                   the backend that loads a folder
``torch_backend``  ``onnx_backend``: the two built-in backends
``precision``      the device and dtype of a torch model, from a load's options
``runs``           the manifest for a chosen adapter; ``load_trained_model``, ``load_run``
``deployments``    the exports a run has measured agreeing and faster, which answer for it under ``auto``
``loading``        ``load_predictor``: step 10 through the host, with explicit ``LoadOptions``
``forward``        batched forward passes that predictors call
``streaming``      reading inputs, predicting in chunks, writing results
``predict``        what ``nlptasks infer`` does with a predictor (formats, ranking, generation)
``adapters``       ``onnx_export``, ``merge``: new run folders made from a trained run
``onnx_quantize``  int8 for ``onnx_export``: static (calibrated, batch-independent) or dynamic

Nothing here keeps process-wide state about how a model is loaded: every load gets its own
:class:`nlptasks.LoadOptions` (docs/architecture.md).
"""

from __future__ import annotations

__all__: list[str] = []
