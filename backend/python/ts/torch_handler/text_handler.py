"""ts.torch_handler.text_handler.TextHandler: the base of the built-in text handlers.

initialize() loads the model (BaseHandler) and the source vocabulary: the manifest's
model.sourceVocab, else source_vocab.pt in the archive, loaded with torch.load. A torchtext
Vocab needs torchtext, which is not a Debian package; a plain dict {token: index} works
without it (unknown tokens map to "<unk>", else 0). The text clean-up helpers are TorchServe's:
HTML tags removed, lower case, contractions expanded, accents and punctuation removed, and
torchtext's basic_english tokenizer.
"""

import logging
import os
import re
import string
import unicodedata

import torch
import torch.nn.functional as F

from ts.handler_utils.text_utils import get_tokenizer
from ts.torch_handler.base_handler import BaseHandler
from ts.torch_handler.contractions import CONTRACTION_MAP

try:
    from captum.attr import LayerIntegratedGradients
except ImportError:  # not packaged for Debian: explanations are refused by name
    LayerIntegratedGradients = None

logger = logging.getLogger(__name__)

CLEANUP_REGEX = re.compile("<.*?>|&([a-z0-9]+|#[0-9]{1,6}|#x[0-9a-f]{1,6});")
CONTRACTIONS_PATTERN = re.compile(
    "({})".format("|".join(re.escape(k) for k in CONTRACTION_MAP)), flags=re.IGNORECASE | re.DOTALL
)


class _DictVocab:
    """A {token: index} dict used like a torchtext Vocab."""

    def __init__(self, mapping):
        self.mapping = mapping
        self.unk = mapping.get("<unk>", 0)

    def __getitem__(self, token):
        return self.mapping.get(token, self.unk)

    def __len__(self):
        return len(self.mapping)


class TextHandler(BaseHandler):
    def __init__(self):
        super().__init__()
        self.source_vocab = None
        self.tokenizer = get_tokenizer("basic_english")
        self.input_text = None
        self.lig = None
        self.initialized = None

    def initialize(self, context):
        super().initialize(context)
        self.initialized = False
        model_info = (self.manifest or {}).get("model", {})
        path = model_info.get("sourceVocab") or self.get_source_vocab_path(context)
        self.source_vocab = self._load_vocab(path)
        embedding = getattr(self.model, "embedding", None)
        if LayerIntegratedGradients is not None and embedding is not None:
            self.lig = LayerIntegratedGradients(self.model, embedding)
        self.initialized = True

    @staticmethod
    def _load_vocab(path):
        try:
            vocab = torch.load(path)
        except ModuleNotFoundError as e:
            raise ImportError(
                f"{os.path.basename(path)}: loading it needs the module '{e.name}' (not available "
                "as a Debian package; save the vocabulary as a dict {token: index} instead)"
            ) from e
        return _DictVocab(vocab) if isinstance(vocab, dict) else vocab

    def get_source_vocab_path(self, ctx):
        path = os.path.join(ctx.system_properties.get("model_dir"), "source_vocab.pt")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                "Missing the source_vocab file: the text handlers need source_vocab.pt in the "
                "archive (--extra-files source_vocab.pt)"
            )
        return path

    def _expand_contractions(self, text):
        def expand(match):
            found = match.group(0)
            expanded = CONTRACTION_MAP.get(found) or CONTRACTION_MAP.get(found.lower())
            return found[0] + expanded[1:]

        text = CONTRACTIONS_PATTERN.sub(expand, text)
        return re.sub("'", "", text)

    def _remove_accented_characters(self, text):
        return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("utf-8")

    def _remove_html_tags(self, text):
        return CLEANUP_REGEX.sub("", text)

    def _remove_punctuation(self, text):
        return text.translate(str.maketrans("", "", string.punctuation))

    def _remove_puncutation(self, *args, **kwargs):
        """TorchServe's misspelt name, kept for handlers that call it."""
        return self._remove_punctuation(*args, **kwargs)

    def _tokenize(self, text):
        return self.tokenizer(text)

    def get_word_token(self, input_tokens):
        return [token.replace("\u0120", "") for token in input_tokens]

    def summarize_attributions(self, attributions):
        attributions = F.softmax(attributions, dim=-1)
        attributions_sum = attributions.sum(dim=-1)
        return attributions / torch.norm(attributions_sum)
