"""ts.context: the Context a handler receives, as TorchServe defines it.

One Context lives for the life of the worker. Before each handle call the worker sets
request_ids ({index: request id}) and request_processor (one RequestProcessor per request, with
its headers and, after the call, the response status, headers and content type it was given).
"""

import os
from typing import Dict, Optional, Tuple

from ts.metrics import Metrics


class Context:
    def __init__(
        self,
        model_name,
        model_dir,
        manifest,
        batch_size,
        gpu,
        mms_version,
        limit_max_image_pixels=True,
        metrics=None,
        model_yaml_config=None,
    ):
        self.model_name = model_name
        self.manifest = manifest
        self._system_properties = {
            "model_dir": model_dir,
            "gpu_id": gpu,
            "batch_size": batch_size,
            "server_name": "MMS",
            "server_version": mms_version,
            "limit_max_image_pixels": limit_max_image_pixels,
        }
        self.request_ids = None
        self.request_processor = None
        self.metrics = metrics if metrics is not None else Metrics(model_name)
        self.model_yaml_config = model_yaml_config if model_yaml_config is not None else {}
        self.stopping_criteria = None
        self.cache = {}
        self.header_key_sequence_id = os.getenv(
            "TS_REQUEST_SEQUENCE_ID", "ts_request_sequence_id"
        )
        self.header_key_sequence_start = os.getenv(
            "TS_REQUEST_SEQUENCE_START", "ts_request_sequence_start"
        )
        self.header_key_sequence_end = os.getenv(
            "TS_REQUEST_SEQUENCE_END", "ts_request_sequence_end"
        )
        # torchserve-c: asks the worker whether request idx of this call was cancelled
        self._is_cancelled = None

    @property
    def system_properties(self):
        return self._system_properties

    def get_request_id(self, idx: int = 0) -> Optional[str]:
        return self.request_ids.get(idx) if self.request_ids else None

    def get_request_header(self, idx: int, key: str) -> Optional[str]:
        return self.request_processor[idx].get_request_property(key)

    def get_all_request_header(self, idx: int) -> Dict[str, str]:
        return self.request_processor[idx].get_request_properties()

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.set_response_header(idx, "content-type", value)

    def get_response_content_type(self, idx: int) -> Optional[str]:
        return self.get_response_headers(idx).get("content-type")

    def get_response_status(self, idx: int) -> Tuple[int, str]:
        rp = self.request_processor[idx]
        return rp.get_response_status_code(), rp.get_response_status_phrase()

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0):
        if self.request_processor is not None and self.request_processor[idx] is not None:
            self.request_processor[idx].report_status(code, phrase)

    def set_all_response_status(self, code: int = 200, phrase: str = "") -> None:
        for rp in self.request_processor or []:
            rp.report_status(code, phrase)

    def get_response_headers(self, idx: int) -> Dict[str, str]:
        return self.request_processor[idx].get_response_headers()

    def set_response_header(self, idx, key, value):
        self.request_processor[idx].add_response_property(key, value)

    def get_sequence_id(self, idx: int) -> str:
        return self.request_processor[idx].get_request_property(self.header_key_sequence_id)

    def is_cancelled(self, idx: int) -> bool:
        """torchserve-c: True once request idx's client went away or its sequence was
        cancelled (a streaming handler stops producing for it)."""
        return bool(self._is_cancelled and self._is_cancelled(idx))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Context) and self.__dict__ == other.__dict__


class RequestProcessor:
    """One request's headers (request side) and status/headers (response side)."""

    def __init__(self, request_header: dict) -> None:
        self._status_code = 200
        self._reason_phrase = None
        self._response_header = {}
        self._request_header = request_header

    def get_request_property(self, key: str) -> Optional[str]:
        v = self._request_header.get(key)
        if v is None:
            v = self._request_header.get(key.lower())
        return v

    def report_status(self, code, reason_phrase=None) -> None:
        self._status_code = code
        self._reason_phrase = reason_phrase

    def get_response_status_code(self) -> int:
        return self._status_code

    def get_response_status_phrase(self) -> Optional[str]:
        return self._reason_phrase

    def add_response_property(self, key: str, value: str) -> None:
        self._response_header[key] = value

    def get_response_headers(self) -> dict:
        return self._response_header

    def get_response_header(self, key: str) -> Optional[str]:
        return self._response_header.get(key)

    def get_request_properties(self) -> dict:
        return self._request_header
