"""Image initializers and image ``writeFile``, as DxDispatch's ImageReaderWriter defines them.

Reading: RGB (C = 3) or RGBA (C = 4), planar NCHW, each value ``byte / 255`` (FLOAT32, or FLOAT16
rounded toward zero), scaled to ``resampleSize`` when the size differs. Writing: planar C = 1, 3
or 4 values clamped to [0, 1] (NaN as 1), times 255, truncated. Every image here is made by the
test itself with Pillow.
"""

from __future__ import annotations

import builtins
import json
import pathlib
import shutil

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image

from dml_jax import cli
from dml_jax.dxdispatch import ModelError, load_model

MODELS = (
    pathlib.Path(__file__).resolve().parents[2]
    / "shared/conformance/dxdispatch_models/DxDispatch/models"
)

RGB = np.array(
    [[[255, 0, 0], [0, 255, 0], [0, 0, 255]], [[10, 20, 30], [128, 64, 32], [1, 254, 127]]],
    np.uint8,
)  # 2 rows x 3 columns


def write_model(tmp_path, resources, commands=(), name="model.json"):
    model = {"resources": resources, "dispatchables": {}, "commands": list(commands)}
    path = tmp_path / name
    path.write_text(json.dumps(model))
    return str(path)


def image_resource(source, size, data_type="FLOAT32", **extra):
    return {
        "initialValues": {"sourcePath": source},
        "initialValuesDataType": data_type,
        "resampleSize": size,
        **extra,
    }


def load_image(tmp_path, source, size, data_type="FLOAT32", **extra):
    path = write_model(tmp_path, {"x": image_resource(source, size, data_type, **extra)})
    return load_model(path, allow_outside_paths=False).resources["x"]


def test_png_reads_planar_rgb_over_255(tmp_path):
    Image.fromarray(RGB, "RGB").save(tmp_path / "a.png")
    res = load_image(tmp_path, "a.png", [1, 3, 2, 3])
    values = np.frombuffer(res.initial, np.float32).reshape(3, 2, 3)
    expected = RGB.transpose(2, 0, 1).astype(np.float32) / np.float32(255)
    np.testing.assert_array_equal(values, expected)
    assert res.size_in_bytes == 3 * 2 * 3 * 4
    assert res.data_type.name == "FLOAT32"


def test_png_alpha_is_the_fourth_plane_or_dropped(tmp_path):
    alpha = np.array([[0, 50, 100], [150, 200, 255]], np.uint8)
    rgba = np.concatenate([RGB, alpha[..., None]], axis=2)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    four = np.frombuffer(load_image(tmp_path, "a.png", [1, 4, 2, 3]).initial, np.float32)
    np.testing.assert_array_equal(four.reshape(4, 2, 3), rgba.transpose(2, 0, 1) / np.float32(255))
    three = np.frombuffer(load_image(tmp_path, "a.png", [1, 3, 2, 3]).initial, np.float32)
    np.testing.assert_array_equal(three.reshape(3, 2, 3), RGB.transpose(2, 0, 1) / np.float32(255))


def test_gray_png_fills_three_equal_planes_and_jpg_without_alpha_is_opaque(tmp_path):
    gray = np.array([[0, 128, 255], [7, 77, 177]], np.uint8)
    Image.fromarray(gray, "L").save(tmp_path / "g.png")
    planes = np.frombuffer(load_image(tmp_path, "g.png", [1, 3, 2, 3]).initial, np.float32)
    for plane in planes.reshape(3, 2, 3):
        np.testing.assert_array_equal(plane, gray / np.float32(255))
    Image.fromarray(np.full((4, 4, 3), 200, np.uint8), "RGB").save(tmp_path / "c.jpg")
    rgba = np.frombuffer(load_image(tmp_path, "c.jpg", [1, 4, 4, 4]).initial, np.float32)
    np.testing.assert_array_equal(rgba.reshape(4, 16)[3], 1.0)  # alpha 255
    np.testing.assert_allclose(rgba.reshape(4, 16)[:3], 200 / 255, atol=2 / 255)  # JPEG is lossy


def test_float16_values_are_byte_over_255_rounded_toward_zero(tmp_path):
    ramp = np.arange(256, dtype=np.uint8).reshape(16, 16)
    Image.fromarray(ramp, "L").save(tmp_path / "r.png")
    res = load_image(tmp_path, "r.png", [1, 3, 16, 16], "FLOAT16")
    halves = np.frombuffer(res.initial, np.float16)[:256].astype(np.float64)
    exact = np.arange(256, dtype=np.float32) / np.float32(255)
    above = np.nextafter(halves.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    assert np.all(halves <= exact) and np.all(exact < above)  # the half at or just below
    assert res.size_in_bytes == 3 * 256 * 2


def test_resample_size_scales_the_image(tmp_path):
    Image.fromarray(np.full((8, 10, 3), (30, 60, 90), np.uint8), "RGB").save(tmp_path / "a.png")
    res = load_image(tmp_path, "a.png", [1, 3, 4, 5])
    values = np.frombuffer(res.initial, np.float32).reshape(3, 4, 5)
    for plane, byte in zip(values, (30, 60, 90)):  # a flat colour stays flat at any size
        np.testing.assert_array_equal(plane, np.float32(byte) / np.float32(255))
    # Upscaling a left-dark, right-bright image keeps that order along each row.
    half = np.zeros((4, 4, 3), np.uint8)
    half[:, 2:] = 255
    Image.fromarray(half, "RGB").save(tmp_path / "h.png")
    up = np.frombuffer(load_image(tmp_path, "h.png", [1, 3, 16, 16]).initial, np.float32)
    row = up.reshape(3, 16, 16)[0, 8]
    assert row[0] == 0 and row[-1] == 1 and np.all(np.diff(row) >= -1e-6)


def _png_values(path):
    return np.asarray(Image.open(path))


def test_png_write_clamps_scales_and_truncates(tmp_path, monkeypatch, capsys):
    values = [0, 0.5, 1, 2, -1, "nan", 0.999, "-inf", "inf"]
    path = write_model(
        tmp_path,
        {"y": {"initialValuesDataType": "FLOAT32", "initialValues": values}},
        [
            {
                "type": "writeFile",
                "resource": "y",
                "targetPath": "out.png",
                "dimensions": [1, 1, 3, 3],
            }
        ],
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", path]) == 0
    assert "Resource 'y' written to 'out.png'" in capsys.readouterr().out
    image = Image.open(tmp_path / "out.png")
    assert image.mode == "L" and image.size == (3, 3)
    np.testing.assert_array_equal(np.asarray(image), [[0, 127, 255], [255, 0, 255], [254, 0, 255]])


def test_png_round_trip_of_an_rgb_initializer(tmp_path, monkeypatch):
    Image.fromarray(RGB, "RGB").save(tmp_path / "a.png")
    path = write_model(
        tmp_path,
        {"x": image_resource("a.png", [1, 3, 2, 3])},
        [{"type": "writeFile", "resource": "x", "targetPath": "b.png", "dimensions": [1, 3, 2, 3]}],
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", path]) == 0
    np.testing.assert_array_equal(_png_values(tmp_path / "b.png"), RGB)


def test_rgba_and_jpg_writes(tmp_path, monkeypatch):
    planes = np.linspace(0, 1, 4 * 2 * 2, dtype=np.float32)
    path = write_model(
        tmp_path,
        {"y": {"initialValuesDataType": "FLOAT16", "initialValues": planes.tolist()}},
        [
            {
                "type": "writeFile",
                "resource": "y",
                "targetPath": "o.PNG",
                "dimensions": [1, 4, 2, 2],
            },
            {
                "type": "writeFile",
                "resource": "y",
                "targetPath": "o.jpg",
                "dimensions": [1, 4, 2, 2],
            },
        ],
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", path]) == 0
    halves = np.float16(planes).astype(np.float32)  # the resource holds FLOAT16 values
    expected = (np.clip(halves, 0, 1) * np.float32(255)).astype(np.uint8)
    png = Image.open(tmp_path / "o.PNG")
    assert png.mode == "RGBA"
    # FLOAT16 from JSON rounds toward zero; allow that one step below NumPy's rounding.
    np.testing.assert_allclose(np.asarray(png).transpose(2, 0, 1).reshape(-1), expected, atol=1)
    jpg = Image.open(tmp_path / "o.jpg")
    assert jpg.format == "JPEG" and jpg.mode == "RGB" and jpg.size == (2, 2)


def test_jpeg_extension_is_raw_bytes_as_in_dxdispatch(tmp_path, monkeypatch):
    raw = bytes(range(8))
    (tmp_path / "a.jpeg").write_bytes(raw)
    res = load_image(tmp_path, "a.jpeg", [], "UINT8")
    assert res.initial == raw


@pytest.mark.parametrize(
    "change, where, pattern",
    [
        ({"resampleSize": []}, "resources.x", r"needs 'resampleSize' \[1, C, H, W\]"),
        ({"resampleSize": [1, 1, 2, 3]}, "resampleSize", r"C must be 3 \(RGB\) or 4 \(RGBA\)"),
        ({"resampleSize": [2, 3, 2, 3]}, "resampleSize", r"N must be 1, got 2"),
        ({"resampleSize": [1, 3, 2]}, "resampleSize", r"must be empty or have four dimensions"),
        ({"resampleSize": [1, 3, 0, 3]}, "resampleSize", r"H and W must be >= 1"),
        ({"resampleMode": "crop"}, "resampleMode", r'must be "scale" for image files'),
        ({"initialValuesDataType": "INT32"}, "initialValuesDataType", r"FLOAT32 or FLOAT16"),
    ],
)
def test_image_initializer_errors(tmp_path, change, where, pattern):
    Image.fromarray(RGB, "RGB").save(tmp_path / "a.png")
    resource = {**image_resource("a.png", [1, 3, 2, 3]), **change}
    path = write_model(tmp_path, {"x": resource})
    with pytest.raises(ModelError, match=pattern) as info:
        load_model(path)
    assert info.value.path.startswith("resources.x") and where in info.value.path


def test_resample_size_is_checked_for_every_file(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3, np.float32))
    resource = {"initialValues": {"sourcePath": "a.npy"}, "resampleSize": [1, 2]}
    with pytest.raises(ModelError, match="must be empty or have four dimensions"):
        load_model(write_model(tmp_path, {"x": resource}))


def test_undecodable_image_is_a_model_error(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ModelError, match="cannot decode image") as info:
        load_image(tmp_path, "bad.png", [1, 3, 2, 3])
    assert info.value.path == "resources.x.initialValues.sourcePath"


@pytest.mark.parametrize(
    "resource, dims, pattern",
    [
        (
            {"initialValuesDataType": "INT32", "initialValues": [1, 2]},
            [1, 1, 1, 2],
            "FLOAT32 or FLOAT16",
        ),
        (
            {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2]},
            [1, 2, 1, 1],
            "channel count 2",
        ),
        (
            {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2]},
            [1, 3, 1, 1],
            "needs 12 bytes",
        ),
    ],
)
def test_image_write_errors_before_anything_runs(tmp_path, resource, dims, pattern):
    command = {"type": "writeFile", "resource": "y", "targetPath": "o.png", "dimensions": dims}
    with pytest.raises(ModelError, match=pattern):
        load_model(write_model(tmp_path, {"y": resource}, [command]))
    assert not (tmp_path / "o.png").exists()


def test_without_pillow_one_line_says_how_to_install(tmp_path, monkeypatch, capsys):
    Image.fromarray(RGB, "RGB").save(tmp_path / "a.png")
    real_import = builtins.__import__

    def no_pil(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("No module named 'PIL'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    reading = write_model(tmp_path, {"x": image_resource("a.png", [1, 3, 2, 3])}, name="r.json")
    writing = write_model(
        tmp_path,
        {"y": {"initialValuesDataType": "FLOAT32", "initialValues": [0.5]}},
        [{"type": "writeFile", "resource": "y", "targetPath": "o.png"}],
        name="w.json",
    )
    for path in (reading, writing):
        assert cli.main(["run", path]) == 1
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.endswith(
            "image files need Pillow: pip install 'dml-jax[image]'"
        )


def test_upstream_image_io_model_writes_a_grayscale_png(tmp_path, monkeypatch, capsys):
    """Microsoft's image_io.json: a .jpg scaled to 512 x 512, a 1x1 CONVOLUTION to gray."""
    if not (MODELS / "image_io.json").is_file():
        pytest.skip("the DxDispatch models are not beside this checkout")
    models = tmp_path / "models"
    shutil.copytree(MODELS, models)
    monkeypatch.chdir(models)
    assert cli.main(["run", str(models / "image_io.json")]) == 0
    assert "Resource 'output' written to 'output.png'" in capsys.readouterr().out
    gray = Image.open(models / "output.png")
    assert gray.mode == "L" and gray.size == (512, 512)
    # The same conversion computed here from the scaled input the model read.
    source = load_model(str(models / "image_io.json"), overwrite=True).resources["input"]
    rgb = np.frombuffer(source.initial, np.float32).reshape(3, 512, 512).astype(np.float64)
    weights = np.array([0.2989, 0.5870, 0.1140], np.float32).astype(np.float64)
    expected = np.einsum("c,chw->hw", weights, rgb)
    pixels = np.asarray(gray).astype(np.float64)
    # Truncation after float32 arithmetic: within one step of the exact product.
    assert np.all(np.abs(pixels - np.floor(np.clip(expected, 0, 1) * 255)) <= 1)
