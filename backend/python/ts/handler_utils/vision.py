"""ts.handler_utils.vision: the image paths of VisionHandler (torchserve-c, issues 32, 34, 37).

A Pipeline is built once from a handler's image_processing (a torchvision Compose, or one
transform) and turns one request's bytes into its image tensor, written into its row of the
batch:
- PIL (TorchServe's path): PIL decodes; the transforms before ToTensor run as given; ToTensor and
  Normalize run as in-place operations on the batch's row, the same float operations as
  ToTensor()(img) then Normalize()(t) (bit for bit) without their four temporaries and
  torch.stack's copy. With fast_decode, a JPEG is decoded at the smallest DCT scale (1/2, 1/4,
  1/8) that still covers the first Resize's output (PIL's draft mode): this changes pixels, so
  it is opt-in, and does nothing where no scale fits (a 640x480 image resized to 256).
- device: torchvision.io.decode_jpeg on a device (nvjpeg on cuda, libjpeg-turbo on the CPU),
  then the same transforms on the uint8 tensor (Resize with antialias), for all the JPEGs of a
  batch at once (one decode call, one resize per image size) and scaled and normalised as one
  batch. Other formats take the PIL path. Pixels differ from PIL's by decoder and resampling
  rounding.
A transform the pipeline does not know after ToTensor (or, on the device path, anywhere) leaves
the image to image_processing itself, as TorchServe runs it.
"""

import base64
import binascii
import io
import warnings

import torch
from PIL import Image
from torchvision import transforms

JPEG_MAGIC = b"\xff\xd8\xff"


def _batched_decode():
    """Whether torchvision.io.decode_jpeg takes a list (0.19 on)."""
    import torchvision

    try:
        return tuple(int(v) for v in torchvision.__version__.split(".")[:2]) >= (0, 19)
    except ValueError:
        return False


BATCHED_DECODE = _batched_decode()


def is_jpeg(data):
    return bytes(data[:3]) == JPEG_MAGIC

# PIL's pixels reach torch read-only (np.asarray); they are only read (copied into the batch)
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", module=__name__
)


class BadImage(ValueError):
    """A request whose image cannot be used: it alone fails, with 400 and this message."""


def request_bytes(value, idx):
    """The image bytes of a request's value (bytes, or base64 text), or a list of numbers (the
    tensor itself)."""
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as e:
            raise BadImage(f"request {idx}: text input is not base64 image data") from e
    if value is None:
        raise BadImage(f"request {idx}: no 'data' or 'body' in the request")
    return value


class Pipeline:
    def __init__(self, image_processing):
        steps = list(getattr(image_processing, "transforms", [image_processing]))
        self.image_processing = image_processing
        self.pil_steps = steps
        self.fused = False
        self.mean = self.std = None
        self._stats = {}  # device -> (mean, std) shaped for a CHW image
        # the fused tail: ToTensor, optionally followed by one Normalize
        for k, t in enumerate(steps):
            if type(t) is transforms.ToTensor:
                tail = steps[k + 1 :]
                if not tail or (len(tail) == 1 and type(tail[0]) is transforms.Normalize):
                    self.pil_steps = steps[:k]
                    self.fused = True
                    if tail:
                        self.mean = torch.as_tensor(tail[0].mean, dtype=torch.float32)
                        self.std = torch.as_tensor(tail[0].std, dtype=torch.float32)
                break
        self.resize = next(
            (t.size for t in self.pil_steps if type(t) is transforms.Resize), None
        )
        self.first_resize = (
            self.pil_steps[0].size
            if self.pil_steps and type(self.pil_steps[0]) is transforms.Resize
            else None
        )
        self.crop = next((t.size for t in self.pil_steps if type(t) is transforms.CenterCrop), None)
        # the device path: every step before ToTensor must be one it can run on a tensor
        self.tensor_steps = None
        if self.fused and all(
            type(t) in (transforms.Resize, transforms.CenterCrop) for t in self.pil_steps
        ):
            self.tensor_steps = [
                transforms.Resize(t.size, t.interpolation, t.max_size, antialias=True)
                if type(t) is transforms.Resize
                else t
                for t in self.pil_steps
            ]

    # ---- decoding

    def _draft_size(self, w, h):
        s = self.first_resize
        if isinstance(s, (list, tuple)):
            return (s[1], s[0]) if len(s) == 2 else (s[0], s[0])
        return (s, max(s, int(s * h / w))) if w <= h else (max(s, int(s * w / h)), s)

    def open_pil(self, data, idx, fast_decode=False):
        try:
            image = Image.open(io.BytesIO(data))
            if fast_decode and image.format == "JPEG" and self.first_resize is not None:
                image.draft(image.mode, self._draft_size(*image.size))
            image.load()
        except Exception as e:  # PIL raises several types for undecodable input
            raise BadImage(f"request {idx}: not an image PIL can read ({e})") from e
        return image

    def pil_stage(self, data, idx, fast_decode=False):
        """The PIL image after the transforms before ToTensor (fused), or the finished tensor
        of image_processing (not fused)."""
        image = self.open_pil(data, idx, fast_decode)
        steps = self.pil_steps if self.fused else [self.image_processing]
        try:
            for t in steps:
                image = t(image)
        except Exception as e:  # pylint: disable=broad-except
            raise BadImage(f"request {idx}: the image cannot be transformed ({e})") from e
        return image

    def device_stage(self, jpegs, device):
        """The JPEGs of a batch, [(request index, bytes)], decoded on device and transformed
        there: [(request index, uint8 CHW tensor or BadImage)]. They are decoded in one call
        where torchvision can (a list, 0.19 on: nvjpeg's batched decode on a GPU), and each set
        of one size is resized and cropped as one batch, so that a batch costs a few kernel
        launches instead of a few per image. One undecodable image fails the batched call: the
        images are then decoded one by one, so that it alone fails."""
        from torchvision.io import ImageReadMode, decode_jpeg

        raws = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for _, data in jpegs]
        images = None
        if len(raws) > 1 and BATCHED_DECODE:
            try:
                images = decode_jpeg(raws, mode=ImageReadMode.RGB, device=str(device))
            except Exception:  # pylint: disable=broad-except
                pass  # which image it was is found one by one below
        if images is None:
            images = []
            for (idx, _), raw in zip(jpegs, raws):
                try:
                    images.append(decode_jpeg(raw, mode=ImageReadMode.RGB, device=str(device)))
                except Exception as e:  # pylint: disable=broad-except
                    images.append(
                        BadImage(f"request {idx}: not a JPEG torchvision can decode ({e})")
                    )
        out = list(images)
        sizes = {}
        for k, image in enumerate(images):
            if isinstance(image, torch.Tensor):
                sizes.setdefault(tuple(image.shape), []).append(k)
        for ks in sizes.values():
            x = torch.stack([images[k] for k in ks]) if len(ks) > 1 else images[ks[0]][None]
            for t in self.tensor_steps:
                x = t(x)
            for j, k in enumerate(ks):
                out[k] = x[j]
        return [(idx, image) for (idx, _), image in zip(jpegs, out)]

    # ---- into the batch

    @staticmethod
    def shape_of(item):
        """The CHW shape item will have as a tensor: a PIL image (fused) or a tensor."""
        if isinstance(item, torch.Tensor):
            return tuple(item.shape)
        return (len(item.getbands()), item.size[1], item.size[0])

    def write(self, item, out):
        """item (a PIL image of the fused path, or a uint8 or finished tensor) into out, a row of
        the float batch. True when out holds pixel values (0-255) that scale() still has to turn
        into what ToTensor and Normalize make: the caller scales the rows together."""
        if isinstance(item, torch.Tensor) and item.is_floating_point():
            out.copy_(item)  # image_processing's own result
            return False
        if not isinstance(item, torch.Tensor):
            if item.mode not in ("RGB", "RGBA", "L", "CMYK", "LA", "P"):
                # ToTensor's other modes (1, I, I;16, F) do not scale by 255
                out.copy_(transforms.ToTensor()(item))
                self._normalize(out)
                return False
            item = torch.from_numpy(_pixels(item)).permute(2, 0, 1)
        out.copy_(item)
        return True

    def scale(self, rows):
        """ToTensor's division and Normalize, in place, on one row or a batch of rows that
        write() filled: elementwise, so the same floats either way."""
        rows.div_(255)
        self._normalize(rows)

    def _normalize(self, out):
        if self.mean is None:
            return
        if out.device not in self._stats:
            self._stats[out.device] = (self.mean.to(out.device).view(-1, 1, 1),
                                       self.std.to(out.device).view(-1, 1, 1))
        mean, std = self._stats[out.device]
        out.sub_(mean).div_(std)


def _pixels(image):
    import numpy as np

    a = np.asarray(image)
    return a.reshape(a.shape[0], a.shape[1], -1)
