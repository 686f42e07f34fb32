"""Detection models for the detection suite, the tiny test detectors (tests/data/detection) and
``benchmarks/experiments/detectors_cpu.py``: torchvision's detectors and a YOLO-style head with
random weights of unit gain, their export by PyTorch's TorchScript exporter, and the comparison
of two sets of detections.

Needs torch and torchvision (not the project's dependencies) for everything but ``rows`` and
``unmatched``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def scaled(torch: Any, model: Any) -> None:
    """Weights of unit gain (He-normal, linear), small biases and batch-norm shifts: random
    weights whose scores rarely tie, so that the order of the detections is the scores'."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                torch.nn.init.kaiming_normal_(m.weight, nonlinearity="linear")
                if m.bias is not None:
                    m.bias.normal_(0, 0.1)
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)


def yolo(torch: Any, body: Any, size: int, classes: int = 3, stride_of: int | None = None):
    """A YOLO-style (anchor-free, YOLOv8's form) head with its post-processing in the graph, as
    detection exports with NMS carry it, over ``body`` (a module with ``out_channels``) on
    ``size`` x ``size`` images: per cell of the body's grid, box distances (left, top, right,
    bottom, in cells, by softplus) and class scores (sigmoid); candidates above a score
    threshold (a NonZero), the best 100 of them (TopK over a count known at run time),
    class-wise NonMaxSuppression (torchvision's ``batched_nms``, offsets by class), at most 30
    kept. Takes one image {3, size, size}; returns boxes, scores and labels."""
    import torchvision

    nn = torch.nn

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body
            self.pred = nn.Conv2d(body.out_channels, 4 + classes, 1)

        def forward(self, image):
            p = self.pred(self.body(image[None]))[0]  # [4 + classes, H, W]
            h, w = p.shape[1:]
            stride = size / w
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            cx, cy = (xs.flatten() + 0.5) * stride, (ys.flatten() + 0.5) * stride
            p = p.flatten(1)
            d = torch.nn.functional.softplus(p[:4]) * stride
            boxes = torch.stack([cx - d[0], cy - d[1], cx + d[2], cy + d[3]], 1)
            scores, labels = torch.sigmoid(p[4:]).max(0)
            keep = scores > 0.25
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            top = scores.topk(min(100, scores.shape[0])).indices
            boxes, scores, labels = boxes[top], scores[top], labels[top]
            kept = torchvision.ops.batched_nms(boxes, scores, labels, 0.45)[:30]
            return {"boxes": boxes[kept], "scores": scores[kept], "labels": labels[kept]}

    return Yolo()


def full_size() -> dict[str, tuple[Any, int]]:
    """name -> (build(torch) -> model, image side): torchvision's detectors with 5 classes and
    no score threshold (every detection kept), at 320 x 320 (SSD300 at its 300), and a
    YOLO-style head over ResNet-50's first three stages (a stride-16 grid of 40 x 40 on 640 x
    640 images)."""

    def tv(name: str, **kw: Any):
        def build(torch: Any) -> Any:
            from torchvision.models import detection as D

            return getattr(D, name)(weights=None, weights_backbone=None, num_classes=5, **kw)

        return build

    def yolo_r50(torch: Any) -> Any:
        import torchvision

        r = torchvision.models.resnet50(weights=None)
        body = torch.nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2,
                                   r.layer3)  # fmt: skip
        body.out_channels = 1024
        return yolo(torch, body, 640)

    size = {"min_size": 320, "max_size": 320}
    return {
        "fasterrcnn_mobilenet": (tv("fasterrcnn_mobilenet_v3_large_320_fpn",
                                    box_score_thresh=0.0), 320),
        "fasterrcnn_r50": (tv("fasterrcnn_resnet50_fpn", box_score_thresh=0.0, **size), 320),
        "retinanet": (tv("retinanet_resnet50_fpn", score_thresh=0.0, **size), 320),
        "ssd300": (tv("ssd300_vgg16", score_thresh=0.0), 300),
        "ssdlite": (tv("ssdlite320_mobilenet_v3_large", score_thresh=0.0), 320),
        "maskrcnn": (tv("maskrcnn_resnet50_fpn", box_score_thresh=0.0, **size), 320),
        "yolo_r50": (yolo_r50, 640),
    }  # fmt: skip


def takes_list(model: Any) -> bool:
    """Whether ``model`` takes a list of images (torchvision's detectors), not one image."""
    return type(model).__name__ != "Yolo"


def export(torch: Any, model: Any, image: Any, path: str) -> dict[str, np.ndarray]:
    """``model`` (eval mode) exported by the TorchScript exporter at opset 17 with one image,
    input ``image``; returns PyTorch's outputs on that image (NumPy), whose names the export's
    outputs take."""
    args = ([image],) if takes_list(model) else (image,)
    with torch.no_grad():
        out = model(*args)
        out = out[0] if takes_list(model) else out
        torch.onnx.export(model, args, path, opset_version=17, input_names=["image"],
                          output_names=list(out), dynamo=False)  # fmt: skip
    return {k: v.detach().cpu().numpy() for k, v in out.items()}


def rows(out: dict) -> np.ndarray:
    """Detections as rows of (score, label, box)."""
    return np.concatenate([np.asarray(out["scores"], np.float32)[:, None],
                           np.asarray(out["labels"]).astype(np.float32)[:, None],
                           np.asarray(out["boxes"], np.float32)], axis=1)  # fmt: skip


def unmatched(a: np.ndarray, b: np.ndarray, tol: float) -> int:
    """Rows of ``a`` with no row of ``b`` within ``tol`` in every field (order aside)."""
    return sum(not np.any(np.abs(b - r).max(axis=1) < tol) for r in a) if len(b) else len(a)


__all__ = ["export", "full_size", "rows", "scaled", "takes_list", "unmatched", "yolo"]
