"""Workflow activations and completions are not walked for payloads nothing would change.

temporalio (1.35) walks every workflow activation three times before the workflow sees it
(codec-decode the payloads marked as external storage references, retrieve externally
stored payloads, codec-decode the rest) and every completion three times after (codec
encode, external store, codec-encode the references), whatever the data converter: with
neither a payload codec nor external storage each walk visits every payload of the task and
leaves it as it was. Measured on a 1-step next turn (five workflow tasks): the walks were
about 5% of the worker's samples, on the turn's critical path.

:func:`install` makes the two entry points skip the walks when the converter has neither (the
engine's default: no ``TURNS_ENCRYPTION_KEYS``); with a codec (encrypted payloads) or
external storage every walk runs as before. What a skipped walk would have found is only
a payload stored externally by some other client while this worker has no storage for it;
such a payload then fails where the workflow decodes it (an unknown encoding) instead of
where the walk would have raised.

It relies on temporalio's worker calling ``temporalio.bridge.worker.decode_activation`` and
``encode_completion`` through the module (as 1.35 does); where a release stops, nothing is
skipped: the same results, only slower.
"""

from __future__ import annotations

from typing import Any

import temporalio.bridge.worker as bridge_worker
from temporalio.converter import DataConverter

_STOCK_DECODE = bridge_worker.decode_activation
_STOCK_ENCODE = bridge_worker.encode_completion


def _walks_nothing(data_converter: DataConverter) -> bool:
    return (
        data_converter.payload_codec is None
        and getattr(data_converter, "external_storage", None) is None
    )


def _metrics() -> Any:
    from temporalio.converter import _extstore  # private: the metrics type the worker reads

    return _extstore.StorageOperationMetrics()


async def decode_activation(
    activation: Any, data_converter: DataConverter, *args: Any, **kwargs: Any
) -> Any:
    """The stock ``decode_activation``, unless no walk could change a payload."""
    if _walks_nothing(data_converter):
        return _metrics()
    return await _STOCK_DECODE(activation, data_converter, *args, **kwargs)


async def encode_completion(
    completion: Any, data_converter: DataConverter, *args: Any, **kwargs: Any
) -> Any:
    """The stock ``encode_completion``, unless no walk could change a payload."""
    if _walks_nothing(data_converter):
        return _metrics()
    return await _STOCK_ENCODE(completion, data_converter, *args, **kwargs)


def install() -> bool:
    """Skip the walks that change nothing, in this process's workflow workers (and replayers).
    Idempotent; False when this temporalio release lacks the metrics type the worker expects
    (then nothing is changed)."""
    try:
        _metrics()
    except (ImportError, AttributeError):  # pragma: no cover - another temporalio release
        return False
    bridge_worker.decode_activation = decode_activation
    bridge_worker.encode_completion = encode_completion
    return True


def uninstall() -> None:
    """The stock walks again (tests)."""
    bridge_worker.decode_activation = _STOCK_DECODE
    bridge_worker.encode_completion = _STOCK_ENCODE
