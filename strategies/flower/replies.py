"""What a node's reply means to the round (the protocol: :mod:`fedpub.protocol`): the update it carries, read
strictly against the model's names, shapes and dtypes (:func:`read_reply`: fedpub's ``update`` record, or a
standard ClientApp's new weights under ``arrays``), the errors of a reply that cannot be read, and a failed
node's reason as one line that holds no data (:func:`failure_summary`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from flwr.app import ConfigRecord, Message

from fedpub import protocol as key
from fedpub.flags import FlagError, name_list
from fedpub.safe_text import safe_message
from fedpub.types import Params, Updates
from fedpub.strategies.flower.records import to_tensors


class MalformedReply(ValueError):
    """A reply the strategy cannot turn into the update the round asked for; it contributes nothing."""


class ProtocolMismatch(MalformedReply):
    """A reply without the model's records, names or shapes: how the ClientApp replies, not what a user trained.
    Raised by :meth:`FedpubStrategy.aggregate_train` too, before anything is released, when every reply of the
    rounds so far had it (nothing ever matched)."""


_REASON = re.compile(r"<class '([^']*)'>:<'(.*)'>", re.S)
"""Flower's form of a failed node's reason: ``<class 'ZeroDivisionError'>:<'division by zero'>``."""
_HEADLINE = re.compile(r"^([A-Za-z_][\w.]*(?:\([\w.]+\))?):(?: (.*))?$", re.M)
"""A traceback's exception line: ``module.Type: message`` at the start of a line."""
WRAPPERS = ("RayTaskError", "ClientAppException")
"""What Ray and Flower wrap a ClientApp's exception in, in a simulation (the ClientApp's own type comes first)."""


def failure_summary(reason: str) -> str:
    """``Type: message`` of a failed node's error ``reason`` (Flower's ``<class '...'>:<'...'>``, or an
    exception's text, which in a simulation is Ray's traceback of the ClientApp's exception): the ClientApp's own
    exception type (not Ray's or Flower's wrapper, when the traceback names it) and its message through
    :func:`~fedpub.safe_text.safe_message` (one short line, withheld when it may hold data). The reason is the
    ClientApp's exception text, which can hold anything, a user's data included: nothing else of it is kept."""
    wrapped = _REASON.fullmatch(reason)
    kind, text = (wrapped[1], wrapped[2]) if wrapped else ("", reason)
    if '\n  File "' in text or "Traceback (most recent call last)" in text:
        lines = [(m[1], m[2] or "") for m in _HEADLINE.finditer(text)]
        own = [line for line in lines if not line[0].rsplit(".", 1)[-1].startswith(WRAPPERS)]
        kind, text = (own or lines or [(kind, "")])[0]
    name = kind.rsplit(".", 1)[-1] or "an error"
    message = safe_message(text)
    return f"{name}: {message}" if message else name


def _prefix_rule(extra: Sequence[str], missing: Sequence[str]) -> str | None:
    """The rule that maps every missing name to an extra one (or back) by a prefix, e.g. ``module.``."""
    for added, base in ((extra, missing), (missing, extra)):
        if not base or len(added) != len(base):
            continue
        for name in added:
            prefix = name[: -len(base[0])] if name.endswith(base[0]) and name != base[0] else None
            if prefix is not None and {prefix + k for k in base} == set(added):
                if added is extra:
                    return (f"every name has the prefix `{prefix}` the model's names do not (the state dict of a "
                            "wrapper: DataParallel/DistributedDataParallel `module.`, torch.compile `_orig_mod.`): "
                            f"reply the wrapped model's own state_dict() (e.g. model.module.state_dict()) or strip "
                            f"`{prefix}`")
                return f"every name lacks the model's prefix `{prefix}`: reply the same model's state_dict()"
    return None


def model_mismatch(got: Mapping[str, torch.Tensor], model: Params, *, dtypes: bool = False) -> str | None:
    """What differs between ``got``'s names and shapes (and ``dtypes``) and the model's: the first few names of
    each difference, and the rule when one explains them all (a prefix on every name); None when they match."""
    missing, extra = [k for k in model if k not in got], [k for k in got if k not in model]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} of the model's {len(model)} names are missing (first: {missing[:3]})")
        if extra:
            parts.append(f"{len(extra)} names are not the model's (first: {extra[:3]})")
        rule = _prefix_rule(extra, missing)
        return "; ".join(parts) + ("" if rule is None else f": {rule}")
    shapes = [f"{k} {tuple(got[k].shape)} instead of {tuple(model[k].shape)}" for k in model
              if got[k].shape != model[k].shape]
    if shapes:
        return f"{len(shapes)} tensors have another shape than the model's (first: {'; '.join(shapes[:3])})"
    types = [f"{k} {got[k].dtype} instead of {model[k].dtype}" for k in model if got[k].dtype != model[k].dtype]
    if dtypes and types:
        return f"{len(types)} tensors have another dtype than the model's (first: {'; '.join(types[:3])})"
    return None


def read_reply(
    reply: Message, sent: Params, client_id: str, *, payloads: Sequence[str] = ()
) -> tuple[Updates, dict]:
    """The update and metrics of one reply, in fedpub's form (``update``) or Flower's standard form (new weights
    under ``arrays``: Δ = new − ``sent``). Raises :class:`ProtocolMismatch` for a reply without either record or
    whose names or shapes are not the model's (the message names the differing keys), :class:`MalformedReply` for
    a reply naming another user, and for one whose applied payloads are not the ``payloads`` it was sent."""
    content = reply.content
    metrics = {
        k: float(v) for k, v in (content[key.METRICS] if key.METRICS in content else {}).items()
        if isinstance(v, (int, float))
    }
    if key.UPDATE in content:
        update = to_tensors(content[key.UPDATE])
        mismatch = model_mismatch(update, sent, dtypes=True)
        if mismatch is not None:
            raise ProtocolMismatch(f"the update under `{key.UPDATE}` does not fit the model: {mismatch}")
        info = content[key.CLIENT] if key.CLIENT in content else ConfigRecord({})
        if key.CLIENT_ID in info and str(info[key.CLIENT_ID]) != client_id:
            raise MalformedReply(f"the reply answers for user {info[key.CLIENT_ID]}, but its node holds {client_id}")
        try:
            applied = name_list(info.get(key.PAYLOADS_APPLIED, []), key=key.PAYLOADS_APPLIED,
                                source=f"user {client_id}'s reply")
        except FlagError as error:
            raise MalformedReply(str(error)) from None
    elif key.ARRAYS in content:
        weights = to_tensors(content[key.ARRAYS])
        mismatch = model_mismatch(weights, sent)
        if mismatch is not None:
            raise ProtocolMismatch(f"the weights under `{key.ARRAYS}` do not fit the model: {mismatch}")
        update = {k: weights[k].to(sent[k].dtype) - sent[k] for k in sent}
        applied = ()
    else:
        raise ProtocolMismatch(
            f"no `{key.UPDATE}` or `{key.ARRAYS}` record (got {sorted(content.keys())}): a standard ClientApp "
            f"replies its new weights under `{key.ARRAYS}`, a fedpub one its update under `{key.UPDATE}` "
            "(clients/flower_protocol.py: update_reply)"
        )
    ignored, unsent = sorted(set(payloads) - set(applied)), sorted(set(applied) - set(payloads))
    if ignored:
        raise MalformedReply(
            f"the node was sent the payloads {ignored} (records {[key.payload_record(n) for n in ignored]}) and did "
            f"not say it trained with them (`{key.CLIENT}.{key.PAYLOADS_APPLIED}`): a ClientApp must apply every "
            "payload it is sent (clients/flower_protocol.py: read_train, update_reply)"
        )
    if unsent:
        raise MalformedReply(f"the reply says it applied the payloads {unsent}, which the node was not sent")
    return update, metrics


@dataclass
class Replies:
    """A round's replies read: by user, the private updates and their metrics and the public updates; the
    private users whose reply did not fit the model (:class:`ProtocolMismatch`, why), and the other failures."""

    private: dict[str, Updates] = field(default_factory=dict)
    metrics: dict[str, dict] = field(default_factory=dict)
    public: dict[str, Updates] = field(default_factory=dict)
    mismatched: dict[str, str] = field(default_factory=dict)
    other_failures: int = 0
