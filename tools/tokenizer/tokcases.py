"""Test cases shared by make_golden.py and compare_live.py: the corpus, the
tokenizers the tests train themselves with Hugging Face `tokenizers`, and the
feature variants (one component changed at a time) that cover every supported
normalizer, pre-tokenizer, decoder, post-processor and added-token option.

Everything here is deterministic for a given seed."""

import copy
import json
import random

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# ---------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------

CURATED = [
    # English
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "It's a dog's life; they're sure we'll win, and I'd say you've got it, I'm told.",
    "IT'S LOUD, THEY'RE HERE, WE'LL SEE, I'D KNOW, YOU'VE WON, I'M IN.",
    "She said \"no\" -- then (quietly) 'yes'... [maybe] {perhaps} <never>?",
    "  leading spaces and trailing spaces   ",
    "multiple     spaces\tand\ttabs\t\tand   more",
    "",
    " ",
    "a",
    "   ",
    "\n",
    "Mr. O'Neil's résumé isn't naïve; the café's crème brûlée is.",
    "e-mail: someone@example.com, URL: https://example.org/path?q=1&r=two#frag",
    # code
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};  // comment\n",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "    indented\n        twice\n\n\n\nblank lines",
    "x=>x**2 && y||z != w ?? v ... :: -> <<= >>= !== ===",
    # CJK, Arabic, Devanagari and other scripts
    "中文分词测试：我们今天去北京大学。",
    "日本語のテキスト、ひらがなとカタカナとカンジ。",
    "한국어 문장입니다. 안녕하세요!",
    "العربية: مرحبا بالعالم، كيف حالك؟",
    "مَرْحَبًا بِكُمْ فِي الْعَالَمِ",
    "हिन्दी में एक वाक्य है। क्षत्रिय, ज्ञान, श्री",
    "Ελληνικά: Καλημέρα κόσμε. Русский текст: Привет, мир!",
    "ภาษาไทย สวัสดีครับ",
    "עברית: שלום עולם",
    # emoji
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵 1️⃣ 🧑🏿‍🚀",
    "family👩‍👩‍👦‍👦together",
    # combining marks and normalization
    "e\u0301 a\u0308\u0304 o\u0302\u0323 n\u0303",
    "Zalgo: Z\u0351\u036b\u0343a\u0352\u0310l\u0314\u0300g\u0364o\u0313",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab (decomposed hangul)",
    "\u212b \u2126 \uf900 \u0958 (NFC changes these)",
    "ﬁ ﬂ ① ㌀ ｆｕｌｌｗｉｄｔｈ (compatibility characters)",
    # odd whitespace
    "non\u00a0breaking\u00a0space",
    "thin\u2009space, ideographic\u3000space, en\u2002em\u2003",
    "zero\u200bwidth\u200cjoiners\u200d\ufeffbom",
    "next\u0085line, line\u2028sep, para\u2029sep, mongolian\u180evowel",
    "vertical\u000btab\u000cform feed\u001cfile sep\u001f",
    "mixed \u00a0 \t\u3000 whitespace runs \u2003\u2003",
    # line endings
    "line one\r\nline two\r\n\r\nline four",
    "cr only\rcarriage\r\r",
    "trailing newlines\n\n\n",
    # digits
    "12345678901234567890",
    "3.14159265358979323846 and 2,718,281,828 and 1e-9",
    "phone +1 (555) 010-9999, year 2024, 007, ٣٤٥ ۱۲۳ १२३",
    "0000000000000000000000000000000000000000",
    # special-token strings inside text
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
    "text <|begin_of_text|> in <|end_of_text|> the middle",
    "<|begin_of_text partial <|eot_id without close <| |>",
    "<s>[INST] Hi there [/INST] Hello</s>",
    "Hello <s> world </s> and <unk> too",
    "<s><s></s></s>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
    "<|endoftext|>tail and head<|endoftext|>",
    "<|bos|>x<|eos|> <|pad|>",
    # added-token feature lines
    "Use [MASK] here and   [MASK]there, [MASK]",
    "Strip <rs>   after and <rs>\tthen <rs>",
    "hello world, ahello, hellob, _hello_, hello",
    "hello! (hello) 'hello' hello123 héllo",
    "wörld and wo\u0308rld and WÖRLD",
    "ñandú and nandu and ñandúes",
    "a spaced token here, not  spaced ",
    "<sep>between<sep> and <sep>",
    # case folding and odd letters
    "x'ſ x'S x'K x'T ǅ ß ẞ İstanbul",
    "control \u0000 nul \u0001 \u0007 bell \u001b[31mred\u001b[0m",
    "rare 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𓀀 𐍈 \U0001F9EC \U000E0041",
    "private use \ue000\U000F0000 and noncharacter \ufffe\uffff",
    "replacement \ufffd char",
]


def feature_lines():
    """The corpus subset the feature variants run on, as (index, text): every
    third curated line plus every line aimed at added tokens (keeps the golden
    files small)."""
    keys = ["[MASK]", "<rs>", "hello", "rld", "ñandú", "spaced", "<sep>", "<|bos|>", "<s>"]
    return [(i, line) for i, line in enumerate(CURATED)
            if i % 3 == 0 or any(k in line for k in keys)]


def random_lines(seed, count):
    """Lines mixing fragments of many scripts, whitespace and punctuation."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        " " * 8 + "\t\n\r", ".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`",
        "éèêëàâäôöûüçñßøåæœ", "中文字符测试分词我们你他", "ひらがなカタカナ漢字",
        "한국어문장", "مرحباالعالم", "हिन्दीक्षत्रिय", "Привет мир", "αβγδεζηθ",
        "\u0301\u0308\u0323\u0303", "😀👍🏽❤️🇫🇷\u200d", "\u00a0\u2009\u3000\u200b\u2028",
    ]
    words = ["the", "of", "and", "token", "hello", "'s", "'ll", "<s>", "</s>",
             "<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "[MASK]", "<rs>"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(3, 12)):
            if rng.random() < 0.2:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def corpus(seed=7, random_count=40):
    return CURATED + random_lines(seed, random_count)


def english(seed, n_lines):
    """English-like training text."""
    rng = random.Random(seed)
    words = ("the of and to a in is it you that he was for on are with as I his they be at "
             "one have this from or had by word but what some we can out other were all there "
             "when up use your how said an each she which do their time if will way about many "
             "then them write would like so these her long make thing see him two has look more "
             "day could go come did number sound no most people my over know water than call "
             "first who may down side been now find any new work part take get place made live "
             "where after back little only round man year came show every good me give our "
             "under name very through just form sentence great think say help low line tokenizer "
             "hello world information development don't it's we're they've I'm").split()
    lines = []
    for _ in range(n_lines):
        n = rng.randint(5, 25)
        s = " ".join(rng.choice(words) for _ in range(n))
        lines.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", ","]))
    return lines


# ---------------------------------------------------------------------------
# Tokenizers trained here
# ---------------------------------------------------------------------------

def training_text(seed):
    return english(seed, 400) + corpus(seed) + [
        "def f(x):\n    return x * 2\n", "int main() { return 0; }\n"] * 5


def train_bytelevel(seed=1, vocab_size=700):
    """GPT-2 style byte-level BPE with BOS/EOS template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|bos|>", "<|eos|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(seed), trainer)
    bos, eos = tok.token_to_id("<|bos|>"), tok.token_to_id("<|eos|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A <|eos|>", special_tokens=[("<|bos|>", bos), ("<|eos|>", eos)])
    return json.loads(tok.to_str())


def train_sentencepiece(seed=1, vocab_size=800):
    """SentencePiece-style BPE: Metaspace, byte_fallback with <0x00>..<0xFF> in the
    model vocab (like Llama 2 / Mistral), unk fused, BOS template."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                  special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=120,
                                  show_progress=False)
    tok.train_from_iterator(training_text(seed), trainer)
    data = json.loads(tok.to_str())
    # Put the 256 byte tokens right after the specials, as SentencePiece does.
    old = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {}
    for s in specials:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for token, _ in old:
        if token not in vocab:
            vocab[token] = len(vocab)
    data["model"]["vocab"] = vocab
    for t in data["added_tokens"]:
        t["id"] = vocab[t["content"]]
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                             "prepend_scheme": "first", "split": False}
    data["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    Tokenizer.from_str(json.dumps(data))  # must load
    return data


# ---------------------------------------------------------------------------
# Feature variants: {"name", "base": "bytelevel"|"sentencepiece", "override": {...}}
# An override replaces top-level keys; "model" entries are merged into the model;
# "extra_added_tokens" are appended to added_tokens with fresh ids.
# ---------------------------------------------------------------------------

def _split(pattern, behavior, invert=False):
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}


def _bytelevel_pre(add_prefix_space=False, use_regex=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
            "use_regex": use_regex}


def features():
    f = []
    digits_punct = {"Regex": r"\p{N}+|[,.;:!?]"}
    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        for invert in [False, True]:
            f.append({"name": "split_%s%s" % (behavior.lower(), "_invert" if invert else ""),
                      "base": "bytelevel",
                      "override": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                          _split(digits_punct, behavior, invert), _bytelevel_pre()]}}})
    f.append({"name": "split_string_pattern", "base": "bytelevel", "override": {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            _split({"String": " "}, "MergedWithNext"), _bytelevel_pre()]}}})
    f.append({"name": "split_empty_matches", "base": "bytelevel", "override": {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            _split({"Regex": r"x*|\s*"}, "Isolated"), _bytelevel_pre()]}}})
    f.append({"name": "bytelevel_prefix_space", "base": "bytelevel", "override": {
        "pre_tokenizer": _bytelevel_pre(add_prefix_space=True, use_regex=True),
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True}}})
    f.append({"name": "llama3_pattern", "base": "bytelevel", "override": {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            _split({"Regex": LLAMA3_PATTERN}, "Isolated"), _bytelevel_pre()]}}})
    f.append({"name": "qwen_pattern_nfc", "base": "bytelevel", "override": {
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            _split({"Regex": QWEN_PATTERN}, "Isolated"), _bytelevel_pre()]}}})
    f.append({"name": "ignore_merges", "base": "bytelevel", "override": {
        "model": {"ignore_merges": True}}})
    f.append({"name": "post_sequence", "base": "bytelevel", "override": {
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                        {"SpecialToken": {"id": "<|pad|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [0], "tokens": ["<|bos|>"]},
                                "<|pad|>": {"id": "<|pad|>", "ids": [2], "tokens": ["<|pad|>"]}}}
        ]}}})
    f.append({"name": "strip_decoder", "base": "bytelevel", "override": {
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
             "use_regex": True},
            {"type": "Strip", "content": " ", "start": 2, "stop": 1}]}}})
    added = [
        {"content": "[MASK]", "single_word": False, "lstrip": True, "rstrip": False,
         "normalized": False, "special": True},
        {"content": "<rs>", "single_word": False, "lstrip": False, "rstrip": True,
         "normalized": False, "special": True},
        {"content": "hello", "single_word": True, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
        {"content": "wörld", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
        {"content": "ñandú", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False},
        {"content": " spaced ", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False},
        {"content": "<sep>", "single_word": False, "lstrip": True, "rstrip": True,
         "normalized": True, "special": True},
    ]
    f.append({"name": "added_tokens_bytelevel", "base": "bytelevel", "override": {
        "normalizer": {"type": "NFC"}, "extra_added_tokens": added}})
    f.append({"name": "added_tokens_sentencepiece", "base": "sentencepiece", "override": {
        "extra_added_tokens": added}})
    for scheme in ["always", "first", "never"]:
        for split in [True, False]:
            f.append({"name": "metaspace_%s%s" % (scheme, "_split" if split else ""),
                      "base": "sentencepiece", "override": {
                          "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
                                            "prepend_scheme": scheme, "split": split},
                          "decoder": {"type": "Sequence", "decoders": [
                              {"type": "ByteFallback"},
                              {"type": "Metaspace", "replacement": "▁",
                               "prepend_scheme": scheme, "split": split}]}}})
    f.append({"name": "legacy_prepend_replace", "base": "sentencepiece", "override": {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "extra_added_tokens": [{"content": "<sep>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": True, "special": True}]}})
    f.append({"name": "unk_no_byte_fallback", "base": "sentencepiece", "override": {
        "model": {"byte_fallback": False, "fuse_unk": False}}})
    f.append({"name": "unk_fused", "base": "sentencepiece", "override": {
        "model": {"byte_fallback": False, "fuse_unk": True}}})
    f.append({"name": "replace_regex", "base": "sentencepiece", "override": {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Replace", "pattern": {"String": "ab"}, "content": "ba"}]},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"Regex": "▁+"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}}})
    f.append({"name": "legacy_add_prefix_space", "base": "sentencepiece", "override": {
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True},
        "decoder": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": False,
                    "prepend_scheme": "never"}}})
    return f


def apply_override(base, override):
    data = copy.deepcopy(base)
    for key, value in override.items():
        if key == "model":
            data["model"].update(value)
        elif key == "extra_added_tokens":
            next_id = max([v for v in data["model"]["vocab"].values()] +
                          [t["id"] for t in data["added_tokens"]]) + 1
            for t in value:
                t = dict(t)
                t["id"] = next_id
                next_id += 1
                data["added_tokens"].append(t)
        else:
            data[key] = value
    return data


# ---------------------------------------------------------------------------
# Reference outputs
# ---------------------------------------------------------------------------

def random_id_sequences(tok, seed, count):
    """Id sequences meant to stress decoding: byte tokens, specials, spaces."""
    rng = random.Random(seed)
    vocab = tok.get_vocab(with_added_tokens=True)
    ids = sorted(vocab.values())
    byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x")]
    space_ids = [i for t, i in vocab.items() if t.startswith("▁") or t.startswith("Ġ")]
    special_ids = [i for t, i in vocab.items() if t.startswith("<") and t.endswith(">")]
    out = []
    for _ in range(count):
        seq = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            pool = ids
            if r < 0.25 and byte_ids:
                pool = byte_ids
            elif r < 0.45 and space_ids:
                pool = space_ids
            elif r < 0.55 and special_ids:
                pool = special_ids
            seq.append(rng.choice(pool))
        out.append(seq)
    return out


def safe_decode(tok, ids, skip):
    """tokenizers' decode, or None where it panics (e.g. Strip with stop longer
    than the text): the tests skip those cases."""
    try:
        return tok.decode(ids, skip_special_tokens=skip)
    except BaseException:  # pyo3's PanicException derives from BaseException
        return None


def reference(tok, lines, decode_seqs):
    """Golden rows: encode (with and without special tokens) and decode.
    `lines` holds (index into the corpus, text) pairs."""
    rows = []
    for line_index, line in lines:
        ids = tok.encode(line, add_special_tokens=False).ids
        special = tok.encode(line, add_special_tokens=True).ids
        row = {"line": line_index, "ids": ids}
        if special != ids:
            row["special"] = special
        decoded = safe_decode(tok, special, False)
        skipped = safe_decode(tok, special, True)
        if decoded != line:
            row["decoded"] = decoded
        if skipped != decoded:
            row["decoded_skip"] = skipped
        rows.append(row)
    for seq in decode_seqs:
        rows.append({"decode_ids": seq, "decoded": safe_decode(tok, seq, False),
                     "decoded_skip": safe_decode(tok, seq, True)})
    return rows
