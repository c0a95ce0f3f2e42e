"""ts.handler_utils.text_utils: the two torchtext helpers TorchServe's text handlers use
(ngrams_iterator, get_tokenizer("basic_english")), so that no torchtext is needed."""

import re


def ngrams_iterator(token_list, ngrams):
    """The tokens, then every run of 2..ngrams consecutive tokens joined by a space."""
    yield from token_list
    for n in range(2, ngrams + 1):
        for i in range(len(token_list) - n + 1):
            yield " ".join(token_list[i : i + n])


# torchtext's "basic_english" normalisation, applied in this order
_BASIC_ENGLISH = [
    (re.compile(r"\'"), " '  "),
    (re.compile(r"\""), ""),
    (re.compile(r"\."), " . "),
    (re.compile(r"<br \/>"), " "),
    (re.compile(r","), " , "),
    (re.compile(r"\("), " ( "),
    (re.compile(r"\)"), " ) "),
    (re.compile(r"\!"), " ! "),
    (re.compile(r"\?"), " ? "),
    (re.compile(r"\;"), " "),
    (re.compile(r"\:"), " "),
    (re.compile(r"\s+"), " "),
]


def _basic_english(line):
    line = line.lower()
    for pattern, repl in _BASIC_ENGLISH:
        line = pattern.sub(repl, line)
    return line.split()


def get_tokenizer(tokenizer, language="en"):
    """None: split on whitespace; "basic_english": torchtext's normaliser; a callable: itself."""
    if tokenizer is None:
        return str.split
    if callable(tokenizer):
        return tokenizer
    if tokenizer == "basic_english":
        if language != "en":
            raise ValueError("basic_english tokenizer only supports the 'en' language")
        return _basic_english
    raise ValueError(
        f"tokenizer {tokenizer!r} is not available (no torchtext or spacy here): use None, "
        "'basic_english' or a callable"
    )
