"""Is a judge's reason language? A cheap tell of a judge that emits noise with a well-formed score.

A judge with random weights (llama-server on a tiny model) still fills the JSON schema: its score
parses, its reason reads `rltu& smno3atid woc p4U0…`. Such a reason is not language in any
script, and these tests say so without a dictionary or a model:

- a high share of symbols (not letters, digits, spaces or ordinary punctuation);
- alphabetic text whose "words" mostly are not word-shaped (digits inside, no vowel, long
  consonant runs, case flipping inside), or a longer Latin-script reason without a single common
  function word of the languages a judge writes reasons in;
- Chinese text (Han characters) of some length without one of the characters any Chinese
  sentence is made of (的, 是, 不, 了, ...): random Han characters almost never include them.

Japanese (kana) and Korean (Hangul) text passes as language. The tests err on the side of
passing: a suspect verdict is one the run does not score, so a false alarm costs a sample.
"""

from __future__ import annotations

import re
import unicodedata

MAX_SYMBOL_SHARE = 0.25
MIN_WORD_SHARE = 0.6
FUNCTION_WORD_MIN_TOKENS = 5  # a reason this long without a common word is not a sentence

_PUNCTUATION = set(".,;:!?'\"()[]{}-–—/…«»“”‘’%&+*=<>#@_`~|\\，。；：！？、（）《》【】「」『』·")
_TOKEN_EDGES = re.compile(r"^[\W_]+|[\W_]+$")
_LATIN_VOWELS = set("aeiouyàáâãäåèéêëìíîïòóôõöùúûüýÿæœøAEIOUYÀÁÂÃÄÅÈÉÊËÌÍÎÏÒÓÔÕÖÙÚÛÜÝŸÆŒØ")
_CONSONANT_RUN = re.compile(r"[b-df-hj-np-tv-xzB-DF-HJ-NP-TV-XZ]{5,}")
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\uac00-\ud7af]")
# Characters nearly every Chinese sentence holds (the most frequent function characters).
_HAN_COMMON = set("的是不了在有和这个为对也就都而与及或但该其没无很答回应错确正")
_HAN_MIN_CHARS = 6
# Common function words of English, French, German, Spanish, Portuguese and Italian reasons.
_FUNCTION_WORD_LINES = """
a an the is are was were be been it its this that these those of to in on for with as by at from and or
but not no does do did has have had which who what answer response correct incorrect
le la les un une des est et de du en que qui pas ne il elle réponse
der die das ein eine ist und nicht zu mit von den dem antwort
el los las una es y que no del por con respuesta
o os as um uma é e não do da com resposta
il lo gli una è e che non di del per con risposta
"""
_FUNCTION_WORDS = frozenset(_FUNCTION_WORD_LINES.split())


def nonlanguage(reason: str) -> bool:
    """True when `reason` is not language in any script (see the module's tests)."""
    chars = [c for c in reason if not c.isspace()]
    if not chars:
        return False  # an empty reason is its own check
    symbols = sum(1 for c in chars if not (c.isalnum() or c in _PUNCTUATION or unicodedata.category(c) == "Mn"))
    if symbols / len(chars) > MAX_SYMBOL_SHARE:
        return True
    han = len(_HAN.findall(reason))
    letters = sum(1 for c in chars if c.isalpha())
    if _KANA_HANGUL.search(reason):
        return False
    if han and han >= letters / 2:
        return han >= _HAN_MIN_CHARS and not any(c in _HAN_COMMON for c in reason)
    tokens = [t for t in (_TOKEN_EDGES.sub("", raw) for raw in reason.split()) if t]
    if not tokens:
        return letters == 0
    shaped = sum(1 for t in tokens if _word_shaped(t))
    if shaped / len(tokens) < MIN_WORD_SHARE:
        return True
    latin = [t.lower() for t in tokens if t.isascii() and t.isalpha()]
    if len(latin) >= FUNCTION_WORD_MIN_TOKENS and len(latin) >= len(tokens) / 2:
        return not any(t in _FUNCTION_WORDS for t in latin)
    return False


def _word_shaped(token: str) -> bool:
    """A word of a language, or words joined the way text joins them ("e.g", "gpt-4o", a URL, a
    path): each part letters or digits only; a letter part a word's shape — a vowel where the
    script is Latin, no run of five consonants, no case flipping inside, no digit within letters.
    ("p4U0" and "smno3atid" fail; "woc" passes: a short token may be a word.)"""
    parts = [p for p in _JOINERS.split(token) if p]
    if not parts:
        return False
    return all(part.isdigit() or _is_number(part) or (part.isalpha() and _letters_shaped(part)) for part in parts)


def _letters_shaped(word: str) -> bool:
    if word.lower() in _VOWELLESS_WORDS:
        return True
    if all(c in _LATIN_VOWELS or c.isascii() for c in word):
        if len(word) > 2 and not any(c in _LATIN_VOWELS for c in word):
            return False
        if _CONSONANT_RUN.search(word):
            return False
    inner = word[1:]
    return not (any(c.isupper() for c in inner) and any(c.islower() for c in inner) and not word.isupper())


# Words of technical text with no vowel (a URL's scheme, file types, units).
_VOWELLESS_WORDS = frozenset({"http", "https", "www", "html", "sql", "css", "xml", "json", "pdf", "cpp", "std", "pwd",
                              "src", "lib", "cmd", "nvml", "llm", "llms", "gpt", "rpc", "grpc", "tcp", "ssh", "dns",
                              "km", "kg", "ml", "mm", "cm", "hz", "khz", "mhz", "ghz", "kwh", "mph", "rpm", "ms", "mb",
                              "gb"})
_JOINERS = re.compile(r"['’\-./:_@#?=&]")


def _is_number(token: str) -> bool:
    return re.fullmatch(r"\d+(?:[.,/]\d+)*%?", token) is not None
