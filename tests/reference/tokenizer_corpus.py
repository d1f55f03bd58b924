"""A fixed corpus of at least 200 strings for tokenizer parity: Chinese,
English, code, numbers, emoji, runs of spaces and newlines, and (per
vocabulary) special tokens inside text. Deterministic: built from fixed pieces
and a seeded generator."""

import random

HANDWRITTEN = [
    "", " ", "  ", "\n", "\n\n\n", "\t", " \t \n ", "Hello world", " Hello world", "Hello World!",
    "hello, world. HELLO? world!", "I'm here, you're there, they'll go, we've seen, he'd know",
    "DON'T SHOUT, It'S fine", "The quick brown fox jumps over the lazy dog.",
    "深度求索是一家人工智能公司。", "你好，世界！", "中文和English混合的句子，包含数字123和符号！",
    "人工智能（AI）正在改变世界：机器学习、深度学习……", "日本語のテキストとカタカナ、ひらがな。", "한국어 문장입니다.",
    "Привет, мир!", "Ελληνικά γράμματα", "Ünïcödé àccénts: café, naïve, façade, Köln",
    "emoji 🦙🚀🔥 and 👨‍👩‍👧‍👦 family", "🙂🙃😉", "flags 🇨🇳🇺🇸", "math ∑∫√∞ ≠ ≤ ≥",
    "def add(a, b):\n    return a + b\n", "int main() {\n\treturn 0;\n}", "for (int i = 0; i < n; ++i) { x[i] += y[i]; }",
    "SELECT * FROM users WHERE id = 42;", "<div class=\"x\">&amp;</div>", "{\"key\": [1, 2.5, -3e10], \"ok\": true}",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32", "$HOME/.bashrc && ls -la | grep x",
    "0", "1", "12", "123", "1234", "12345", "123456789", "3.14159", "-42", "1,000,000", "1e-5", "0x1F", "2024-11-29",
    "   leading", "trailing   ", "multiple     spaces     inside", "line1\nline2\r\nline3\rline4", "\n\n  indented\n",
    "a", "ab", "abc", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "zzzz yyyy xxxx", "Ⅻ ⅻ ① ②", "½ ¾ ²³",
    "(parentheses) [brackets] {braces} <angles>", "!!!???...,,,;;;:::", "'quoted' \"double\" `back`",
    "tab\tseparated\tvalues", "mixedCASEWords andCamelCase and snake_case_words", "ÀÉÎÕÜ ñ ç ß ø å",
]

WORDS = ["model", "inference", "DeepSeek", "token", "server", "GPU", "cache", "attention", "的", "模型", "推理",
         "服务", "请求", "中国", "🤖", "📈", "42", "2048", "3.5", "x", "Qwen", "Llama", "<tag>", "don't", "it's"]
SEPARATORS = [" ", "  ", "\n", "\t", "", ", ", ". ", "，", "。", " \n ", "   \n\n"]


def corpus(special_texts=()):
    """The corpus; special_texts are this vocabulary's special token texts."""
    rng = random.Random(20261129)
    strings = list(HANDWRITTEN)
    while len(strings) < 200:
        n = rng.randint(1, 12)
        parts = []
        for _ in range(n):
            parts.append(rng.choice(WORDS))
            parts.append(rng.choice(SEPARATORS))
        strings.append("".join(parts))
    specials = [s for s in special_texts if s]
    for i, special in enumerate(specials[:20]):
        strings.append(f"before{special}after")
        strings.append(f"{special} Hello {special}\n{rng.choice(WORDS)}")
    return strings
