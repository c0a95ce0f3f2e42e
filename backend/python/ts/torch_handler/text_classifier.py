"""ts.torch_handler.text_classifier.TextClassifier: TorchServe's built-in text classifier.

For a model called as model(tokens, offsets) (an EmbeddingBag text classifier). Like
TorchServe's, it takes the first request of a batch only, so serve it with batchSize 1. The text
is cleaned (TextHandler), tokenised, extended with bigrams, mapped through the vocabulary, and
the answer is {label: probability} over every class (softmax), labels from index_to_name.json.
"""

import logging

import torch
import torch.nn.functional as F

from ts.handler_utils.text_utils import ngrams_iterator
from ts.torch_handler.text_handler import TextHandler
from ts.utils.labels import map_class_to_label

logger = logging.getLogger(__name__)


class TextClassifier(TextHandler):
    ngrams = 2

    def preprocess(self, data):
        if len(data) > 1:
            raise ValueError(
                f"text_classifier handles one request per call, got a batch of {len(data)}: "
                "serve it with batchSize 1"
            )
        line = data[0]
        text = line.get("data") or line.get("body")
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise ValueError("text_classifier expects text in the request body")
        text = self._remove_html_tags(text)
        text = text.lower()
        text = self._expand_contractions(text)
        text = self._remove_accented_characters(text)
        text = self._remove_punctuation(text)
        tokens = self._tokenize(text)
        ids = [self.source_vocab[t] for t in ngrams_iterator(tokens, self.ngrams)]
        return torch.as_tensor(ids, device=self.device), tokens

    def inference(self, data, *args, **kwargs):
        text_tensor, _ = data
        offsets = torch.as_tensor([0], device=self.device)
        return super().inference(text_tensor, offsets)

    def postprocess(self, data):
        return map_class_to_label(F.softmax(data, dim=1).tolist(), self.mapping)

    def get_insights(self, text_preprocess, _, target=0):
        if self.lig is None:
            raise NotImplementedError(
                "explanations need Captum (captum.attr.LayerIntegratedGradients) and a model "
                "with an `embedding` layer; Captum is not available as a Debian package"
            )
        from captum.attr import TokenReferenceBase

        text_tensor, all_tokens = text_preprocess
        offsets = torch.tensor([0]).to(self.device)
        reference = TokenReferenceBase().generate_reference(
            text_tensor.shape[0], device=self.device
        ).squeeze(0)
        attributions = self.lig.attribute(
            text_tensor, reference, additional_forward_args=(offsets), target=target
        )
        return [
            {
                "importances": self.summarize_attributions(attributions).tolist(),
                "words": self.get_word_token(all_tokens),
            }
        ]
