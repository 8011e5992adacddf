#!/usr/bin/env python3
"""dhp's byte-level BPE tokenizer against Hugging Face tokenizers, string by string.

  .venv/bin/python tests/hf_tokenizer_parity.py DHP_TOKENIZE [--count N] [--seed S] [--keep DIR]

Builds a Qwen2-style tokenizer.json with the `tokenizers` library: a byte-level BPE trained on a
varied generated corpus, an NFC normalizer, Qwen2's pre-tokenizer (Split with Qwen2's regex,
Isolated, then ByteLevel without prefix space or regex), a ByteLevel decoder and Qwen2.5-VL's
added tokens after the vocabulary (special ones, and the non-special <tool_call> family). Then
generates N (10,000) strings from a seed: decomposed accents (NFD), Hangul jamo, CJK
compatibility ideographs, emoji with ZWJ and skin tones, whitespace runs (tabs, U+00A0,
U+3000, ...), CRLF and lone CR, contractions in any case, digit runs, mixed scripts,
punctuation, code, and added-token strings inside text. For every string it asserts:
  1. dhp-tokenize's ids equal tokenizers' ids (with added tokens; and with dhp's
     --no-added-tokens against the same tokenizer.json less its added tokens);
  2. dhp's Decode of those ids equals tokenizers' decode;
and decodes random id lists (cut characters, added tokens, skip_special_tokens both ways) with
both. Everything runs twice: model.ignore_merges false (as in Qwen2) and true. Exit status 1 on
any mismatch, after printing the first few (repr, both id lists); the last line is a summary.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

# Qwen2's pre-tokenizer pattern, as written in Qwen2 / Qwen2.5-VL's tokenizer.json.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
           "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
           "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
           "<|image_pad|>", "<|video_pad|>"]
NON_SPECIAL = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
               "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
VOCAB_SIZE = 6000
SHOW = 5  # mismatches printed per check

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could "
         "people my than first water been call who oil its now find long down day did get come "
         "made may part image picture model token vision language training gradient tensor "
         "colour shape circle square triangle").split()
ACCENTED = ("café naïve Ångström résumé über São Paulo Việt Nam Đà Nẵng crème brûlée "
            "façade jalapeño Zürich Ελληνικά άλφα Ёлка йогурт Œuvre Łódź Kraków Dvořák "
            "Mötley Ærø Ñandú ǅemal Ṩ ḗ ǖ ȫ ǭ ậ ệ ở ự").split()
SCRIPTS = ["Привет мир", "Γειά σου κόσμε", "مرحبا بالعالم", "مَرْحَبًا", "שָׁלוֹם עוֹלָם",
           "नमस्ते दुनिया", "क़िला ज़मीन", "বাংলা ভাষা", "কো", "தமிழ் மொழி", "ภาษาไทย",
           "ລາວ", "ქართული", "Հայերեն", "አማርኛ", "ᠮᠣᠩᠭᠣᠯ", "日本語のテキスト", "カタカナ",
           "가나다라 한국어", "中文文本，测试。", "繁體中文", "ㄅㄆㄇ", "𝐀𝐁𝐂 𝓩", "𐍈𐌰𐌹",
           "Ꭰꭰ", "ᚠᛇᚻ", "ꦗꦮ", "ⰀⰁ"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + list("“”‘’«»—–…·¿¡、。「」《》〜・‰§¶†‡•")
SPACES = [" ", " ", " ", "\t", "\u00a0", "\u3000", "\u2009", "\u2002", "\u202f", "\u205f",
          "\u1680", "\x0b", "\x0c", "\u0085", "\u2028", "\u2029", "\u200b", "\ufeff"]
NEWLINES = ["\n", "\n", "\r\n", "\r", "\n\n", "\r\n\r\n", "\n\n\n", "\r\r", "\n\r"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
EMOJI = ["😀", "👍", "🎉", "🙂", "❤️", "✨", "🔥", "🚀", "🐍", "🍣", "☕", "⚽", "🇫🇷", "🇯🇵",
         "1️⃣", "#️⃣", "©️", "™", "🏳️‍🌈", "👨‍👩‍👧‍👦", "🧑🏽‍💻", "👩🏿‍🔬", "🤷‍♂️", "🫠"]
SKIN = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "०१२३४५६७८९", "²³¹⁴", "½¼¾",
          "ⅫⅣ", "①②③", "〇一二三"]
CODE = ["def f(x):\n    return x + 1\n", "}\n\n", "if (a && b) {\n\tfoo();\n}\n",
        '{"key": [1, 2.5, null]}', "x = y**2  # comment\n", "</div>\n<p class=\"a\">",
        "SELECT * FROM t WHERE id = 42;\r\n", "    \n    ", "a.\n\nb", ".\n", "\\n\\t"]


def cp_range(rng, lo, hi):
    return chr(rng.randint(lo, hi))


def assigned_char(rng):
    """Any character assigned in Python's Unicode (14.0): no surrogates, no unassigned."""
    while True:
        cp = rng.choice([rng.randint(0x20, 0x2FFF), rng.randint(0x3000, 0xFFFD),
                         rng.randint(0x10000, 0x1FAFF), rng.randint(0x20000, 0x2A6DF),
                         rng.randint(0, 0x1F)])
        c = chr(cp)
        if unicodedata.category(c) not in ("Cn", "Cs"):
            return c


def frag_words(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 8))]
    case = rng.random()
    if case < 0.15:
        words = [w.upper() for w in words]
    elif case < 0.4:
        words = [w.capitalize() for w in words]
    return " ".join(words)


def frag_contraction(rng):
    c = rng.choice(CONTRACTIONS + ["'S", "'T", "'RE", "'Ve", "'mM", "'LL", "'D", "'ſ", "’s"])
    word = rng.choice(WORDS + ["I", "YOU", "it", "", " ", "x", "1"])
    return word + c + rng.choice(["", " ", "s", "t", " ok", "'", "\n"])


def frag_digits(rng):
    digits = rng.choice(DIGITS)
    run = "".join(rng.choice(digits) for _ in range(rng.randint(1, 20)))
    return rng.choice(["", " ", "$", "-", "v", "#"]) + run + rng.choice(["", ".5", "%", " ", "px"])


def frag_spaces(rng):
    return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 6)))


def frag_newlines(rng):
    return (rng.choice(["", " ", "  ", "\t", ".", "}", ":", "!"]) + rng.choice(NEWLINES) +
            rng.choice(["", " ", "   ", "\t", "\n"]))


def frag_nfd(rng):
    return unicodedata.normalize("NFD", rng.choice(ACCENTED))


def frag_marks(rng):
    """A base letter with combining marks in random (often non-canonical) order."""
    base = rng.choice("aeiouyAEOUnNcsSzqwkx" + "αοωи")
    marks = "".join(cp_range(rng, 0x0300, 0x036F) for _ in range(rng.randint(1, 4)))
    marks += rng.choice(["", "\u0323", "\u0327", "\u1dc0", "\u20d7", "\ufe20"])
    return base + marks


def frag_hangul(rng):
    kind = rng.random()
    if kind < 0.4:  # conjoining L V (T): composes to a syllable
        out = cp_range(rng, 0x1100, 0x1112) + cp_range(rng, 0x1161, 0x1175)
        return out + (cp_range(rng, 0x11A8, 0x11C2) if rng.random() < 0.5 else "")
    if kind < 0.6:  # a precomposed LV syllable then a trailing jamo
        return chr(0xAC00 + 28 * rng.randint(0, 398)) + cp_range(rng, 0x11A8, 0x11C2)
    if kind < 0.8:  # anything in the jamo block, archaic ones included
        return "".join(cp_range(rng, 0x1100, 0x11FF) for _ in range(rng.randint(1, 6)))
    return unicodedata.normalize("NFD", "".join(chr(rng.randint(0xAC00, 0xD7A3))
                                                 for _ in range(rng.randint(1, 4))))


def frag_compat_cjk(rng):
    return "".join(cp_range(rng, 0xF900, 0xFAFF) for _ in range(rng.randint(1, 4)))


def frag_emoji(rng):
    e = rng.choice(EMOJI)
    if rng.random() < 0.3:
        e = rng.choice(["👍", "👋", "🧑", "👩", "🤝"]) + rng.choice(SKIN)
    if rng.random() < 0.2:
        e += "\u200d" + rng.choice(EMOJI)
    return e * rng.randint(1, 3)


def frag_script(rng):
    return rng.choice(SCRIPTS)


def frag_punct(rng):
    return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 5)))


def frag_special(rng):
    token = rng.choice(SPECIAL + NON_SPECIAL)
    kind = rng.random()
    if kind < 0.6:
        return token
    if kind < 0.75:
        return token[:rng.randint(1, len(token) - 1)]  # a cut-off token is plain text
    if kind < 0.9:
        return token + rng.choice(["\u0301", "\u0308", "\u1161", "e\u0301"])
    return "<|" + token + "|>"


def frag_code(rng):
    return rng.choice(CODE)


def frag_random(rng):
    return "".join(assigned_char(rng) for _ in range(rng.randint(1, 5)))


FRAGMENTS = [(frag_words, 6), (frag_contraction, 3), (frag_digits, 2), (frag_spaces, 3),
             (frag_newlines, 3), (frag_nfd, 3), (frag_marks, 2), (frag_hangul, 2),
             (frag_compat_cjk, 1), (frag_emoji, 2), (frag_script, 2), (frag_punct, 2),
             (frag_special, 2), (frag_code, 1), (frag_random, 2)]
SEPARATORS = ["", " ", " ", "", "\n", ", ", "  ", "\t"]

EDGE_CASES = ["", " ", "  ", "\n", "\r", "\r\n", "\t", "'s", "'S", "a", "é", "e\u0301",
              "\u0301", "\u0301e", "\u1100\u1161\u11a8", "\uf900", "\u212b", "\u2126",
              "<|im_start|>", "<|im_start|><|im_end|>", "<|im_start", "<<|im_end|>>",
              " " * 300, "\n" * 50, "a" * 500, "1" * 40, "🙂" * 30, "x\u00a0\u00a0y",
              "\u3000\u3000z", "a.\n\nb", "Hello, world!\n\nBye", "don't DON'T Don'T",
              "I'M HE'LL we'RE", "\x00\x01\x7f", "\ufeffbom", "\ufffd", "\ue000\U000f0000",
              "s\u0307\u0323", "q\u0307\u0323", "\u0958", "\u09c7\u09be", "\u0b47\u0b3e",
              "\u3099\u304b", "\u304b\u3099", "\u1e9b\u0323", "Å", "A\u030a", "\u00c5\u0301",
              # Newer than ICU 72 (Unicode 15.0) or Python's tables: Unicode 15 letters (Cyrillic
              # modifier, CJK Ext H, Kawi), 15.1 (CJK Ext I), and two Unicode 16 canonical
              # compositions (Kirat Rai, Tulu-Tigalari) that neither side composes today; a
              # tokenizers built with Unicode 16 tables would compose them, and this test says so.
              "a\U0001e030b x", " \U00031350\U00031351", " \U00011f04\U00011f05", " \U0002ebf0",
              "\U00016d63\U00016d67", "\U000113c2\U000113b8"]


def make_string(rng):
    names, weights = zip(*FRAGMENTS)
    parts = rng.choices(names, weights=weights, k=rng.randint(1, 6))
    out = ""
    for f in parts:
        out += f(rng) + rng.choice(SEPARATORS)
    return out if rng.random() < 0.8 else out.rstrip()


def make_strings(count, seed):
    rng = random.Random(seed)
    strings = list(EDGE_CASES)
    while len(strings) < count:
        strings.append(make_string(rng))
    return strings


def build_tokenizer(seed):
    """A Qwen2-style tokenizer trained with tokenizers on a generated corpus."""
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = random.Random(seed + 1)
    corpus = [make_string(rng) for _ in range(30000)]
    corpus += [" ".join(rng.choice(WORDS) for _ in range(12)) + ".\n\n" for _ in range(3000)]
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL])
    return tok


def run_dhp(binary, tokenizer_json, requests, folder, extra_flags=()):
    inp, out = os.path.join(folder, "requests.jsonl"), os.path.join(folder, "answers.jsonl")
    with open(inp, "w", encoding="utf-8", newline="\n") as f:
        for r in requests:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    proc = subprocess.run([binary, "--tokenizer", tokenizer_json, "--input", inp, "--output", out,
                           *extra_flags], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"{binary} failed ({proc.returncode}): {proc.stderr}")
    with open(out, encoding="utf-8") as f:
        answers = [json.loads(line) for line in f]
    if len(answers) != len(requests):
        sys.exit(f"{binary}: {len(answers)} answers for {len(requests)} requests")
    return answers


def dhp_text(answer):
    """dhp's decoded bytes as tokenizers shows them (invalid UTF-8 replaced, as Rust does)."""
    if "decoded_hex" in answer:
        return bytes.fromhex(answer["decoded_hex"]).decode("utf-8", errors="replace")
    return answer.get("decoded")


class Report:
    def __init__(self):
        self.checked, self.failed = {}, {}

    def check(self, name, ok, detail):
        self.checked[name] = self.checked.get(name, 0) + 1
        if ok:
            return
        self.failed[name] = self.failed.get(name, 0) + 1
        if self.failed[name] <= SHOW:
            print(f"MISMATCH [{name}] {detail()}")


def check_encode(report, label, binary, path, tok, strings, folder, flags=()):
    answers = run_dhp(binary, path, strings, folder, flags)
    for s, hf, a in zip(strings, tok.encode_batch(strings, add_special_tokens=False), answers):
        ids = a.get("ids")
        report.check(f"{label} ids", ids == hf.ids,
                     lambda: f"{s!r}\n  dhp: {ids or a}\n  hf:  {hf.ids}")
        if ids is not None:
            want = tok.decode(hf.ids, skip_special_tokens=False)
            report.check(f"{label} decode", dhp_text(a) == want,
                         lambda: f"{hf.ids}\n  dhp: {dhp_text(a)!r}\n  hf:  {want!r}")


def check_decode(report, label, binary, path, tok, seed, folder, count=2000):
    rng = random.Random(seed + 2)
    size = tok.get_vocab_size(with_added_tokens=True)
    requests = []
    for _ in range(count):
        ids = [rng.randrange(size) for _ in range(rng.randint(0, 12))]
        requests.append({"decode": ids, "skip_special_tokens": rng.random() < 0.5})
    answers = run_dhp(binary, path, requests, folder)
    for r, a in zip(requests, answers):
        want = tok.decode(r["decode"], skip_special_tokens=r["skip_special_tokens"])
        report.check(f"{label} decode random ids", dhp_text(a) == want,
                     lambda: f"{r}\n  dhp: {a}\n  hf:  {want!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dhp_tokenize", help="the dhp-tokenize binary")
    ap.add_argument("--count", type=int, default=10000, help="strings to compare (10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", help="write the tokenizer.json and strings here and keep them")
    args = ap.parse_args()
    binary = os.path.abspath(args.dhp_tokenize)
    tok = build_tokenizer(args.seed)
    strings = make_strings(args.count, args.seed)
    nfc = normalizers.NFC()
    changed = sum(nfc.normalize_str(s) != s for s in strings)
    report = Report()
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(folder, exist_ok=True)
        for ignore_merges in (False, True):
            label = f"ignore_merges={str(ignore_merges).lower()}"
            j = json.loads(tok.to_str())
            j["model"]["ignore_merges"] = ignore_merges
            variant = Tokenizer.from_str(json.dumps(j))
            path = os.path.join(folder, f"tokenizer-{label}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False, indent=1)
            check_encode(report, label, binary, path, variant, strings, folder)
            check_decode(report, label, binary, path, variant, args.seed, folder)
            # dhp's --no-added-tokens (all added tokens as plain text, for untrusted text) against
            # the same tokenizer.json without its added tokens.
            j["added_tokens"] = []
            plain = Tokenizer.from_str(json.dumps(j))
            check_encode(report, label + " no-added-tokens", binary, path, plain, strings, folder,
                         ("--no-added-tokens",))
    total = sum(report.checked.values())
    failed = sum(report.failed.values())
    for name in report.checked:
        print(f"  {name}: {report.checked[name]} checked, {report.failed.get(name, 0)} mismatches")
    print(f"hf_tokenizer_parity: {len(strings)} strings ({changed} changed by NFC), "
          f"vocab {tok.get_vocab_size(with_added_tokens=True)}, {total} checks, "
          f"{failed} mismatches: {'FAIL' if failed else 'OK'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
