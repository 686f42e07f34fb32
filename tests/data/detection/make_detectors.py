"""Writes the tiny detectors of tests/test_onnx_detection.py: torchvision's Faster R-CNN,
RetinaNet, SSD and Mask R-CNN heads and a YOLO-style head with its NMS over a small random
backbone (8 to 16 channels; the YOLO-style head and the weights' scaling are
``dml_jax.bench.detectors``'), exported by PyTorch's
TorchScript exporter at opset 17 with one 3 x 96 x 96 image, random weights scaled so that the
scores are distinct (no ties for the order of equal scores to decide).

Needs torch and torchvision (not the project's dependencies): ``python
tests/data/detection/make_detectors.py``. The files it writes are committed; the tests compare
dml_jax with onnxruntime on them.
"""

from __future__ import annotations

import os
import warnings

from dml_jax.bench import detectors  # the weights' scaling and the YOLO-style head

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 96


def _backbone(torch, channels: int):
    """Two strided convolutions with batch norm: ``out_channels`` as torchvision's heads read."""
    nn = torch.nn
    body = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, channels, 3, stride=2, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
    )  # fmt: skip
    body.out_channels = channels
    return body


def models(torch, torchvision) -> dict:
    from torchvision.models import detection as D
    from torchvision.models.detection.anchor_utils import AnchorGenerator, DefaultBoxGenerator
    from torchvision.models.detection.ssd import SSD
    from torchvision.ops import MultiScaleRoIAlign

    common = {"min_size": SIZE, "max_size": SIZE}
    anchors = AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),))
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead

    faster = D.FasterRCNN(
        _backbone(torch, 16), rpn_anchor_generator=anchors,
        box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), box_head=TwoMLPHead(16 * 7 * 7, 32),
        box_predictor=FastRCNNPredictor(32, 4), box_score_thresh=0.0,
        rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=50, box_detections_per_img=20,
        **common,
    )  # fmt: skip
    retina = D.RetinaNet(
        _backbone(torch, 16), num_classes=4,
        anchor_generator=AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),)),
        score_thresh=0.0, detections_per_img=30, topk_candidates=100, **common,
    )  # fmt: skip
    ssd_backbone = _backbone(torch, 16)
    ssd = SSD(
        _SSDFeatures(torch, ssd_backbone), DefaultBoxGenerator([[2]]), (SIZE, SIZE),
        num_classes=4, score_thresh=0.0, detections_per_img=30, topk_candidates=100,
    )  # fmt: skip
    return {
        "faster_rcnn": faster,
        "retinanet": retina,
        "ssd": ssd,
        "yolo": detectors.yolo(torch, _backbone(torch, 16), SIZE),
    }


def mask_rcnn(torch):
    """Mask R-CNN over the same backbone and heads as Faster R-CNN, with a mask head: its
    export pastes each detection's mask into the image in a Loop (a Resize to the box a
    detection), which the session runs on the host. Built after the others are written, so
    that their weights stay the ones drawn before it was added."""
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign

    return MaskRCNN(
        _backbone(torch, 16),
        rpn_anchor_generator=AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),)),
        box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), box_head=TwoMLPHead(16 * 7 * 7, 32),
        box_predictor=FastRCNNPredictor(32, 4), box_score_thresh=0.0,
        mask_roi_pool=MultiScaleRoIAlign(["0"], 14, 2), mask_head=MaskRCNNHeads(16, (16,), 1),
        mask_predictor=MaskRCNNPredictor(16, 16, 4),
        rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=50, box_detections_per_img=20,
        min_size=SIZE, max_size=SIZE,
    )  # fmt: skip


def _SSDFeatures(torch, body):
    """SSD's backbone returns an ordered dict of feature maps (one here)."""

    class Features(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, x):
            from collections import OrderedDict

            return OrderedDict([("0", self.body(x))])

    return Features()


def main() -> None:
    import torch
    import torchvision

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    image = torch.rand(3, SIZE, SIZE)
    built = models(torch, torchvision)
    for name in [*built, "mask_rcnn"]:
        model = built[name] if name in built else mask_rcnn(torch)
        detectors.scaled(torch, model)
        model.eval()
        path = os.path.join(HERE, f"{name}.onnx")
        args = (image,) if name == "yolo" else ([image],)
        with torch.no_grad():
            out = model(*args)
            out = out if name == "yolo" else out[0]
            torch.onnx.export(model, args, path, opset_version=17, input_names=["image"],
                              output_names=list(out), dynamo=False)  # fmt: skip
        print(name, {k: tuple(v.shape) for k, v in out.items()}, os.path.getsize(path))


if __name__ == "__main__":
    main()
