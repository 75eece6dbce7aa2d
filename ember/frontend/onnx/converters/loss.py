"""ONNX losses, written with ember's operators: NegativeLogLikelihoodLoss picks each target's
entry along the class axis (gather_elements), weights it (by class, 0 where the target is
ignore_index) and reduces ("none", "sum", or "mean": the weighted sum over the sum of the
weights); SoftmaxCrossEntropyLoss is that on log_softmax over the class axis, which is its
optional second output."""

from __future__ import annotations

from ..node import NodeContext, Tensor
from ..registry import converts


def _nll(cx: NodeContext, log_prob: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    ignore = cx.attr("ignore_index")
    reduction = cx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise cx.error(f"reduction must be none, sum or mean, got {reduction!r}")
    kept = None
    if ignore is not None:  # ignored targets read class 0, weighted 0
        hit = cx.op("equal", [target, cx.scalar(ignore, target)])
        kept = cx.op("cast", [cx.op("logical_not", [hit])], {"dtype": cx.type(log_prob).dtype})
        target = cx.op("where", [hit, cx.scalar(0, target), target])
    picked = cx.op("gather_elements", [log_prob, cx.op("unsqueeze", [target], {"axes": (1,)})], {"axis": 1})
    loss = cx.op("neg", [cx.op("squeeze", [picked], {"axes": (1,)})])
    scale = None if weight is None else cx.op("gather", [weight, target], {"axis": 0})
    if kept is not None:
        scale = kept if scale is None else cx.op("mul", [scale, kept])
    if scale is not None:
        loss = cx.op("mul", [loss, scale])
    if reduction == "none":
        return loss
    total = cx.op("sum", [loss])
    if reduction == "sum":
        return total
    return cx.op("mean", [loss]) if scale is None else cx.op("div", [total, cx.op("sum", [scale])])


@converts("NegativeLogLikelihoodLoss")
def _negative_log_likelihood(cx: NodeContext):
    return [_nll(cx, cx.input(0), cx.input(1), cx.optional(2))]


@converts("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(cx: NodeContext):
    log_prob = cx.op("log_softmax", [cx.input(0)], {"axis": 1})
    return [_nll(cx, log_prob, cx.input(1), cx.optional(2)), log_prob][:cx.num_outputs]
